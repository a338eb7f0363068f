"""Beam build of pooled datasets: determinism, round trip, validation, atomicity,
bad input, and the `wmx dataset` / `beam run` commands.

Default run: real Playground episodes of two tasks with different obs and
action dims (cartpole-balance O=5 A=1, cheetah-run O=17 A=6; T=20, uniform
random actions, collected with the real row collector and stored in
tests/pipelines/data, see episode_fixtures) written as three episode sets with
the real writer, built once per module. `slow`: the same episodes re-collected
from Playground, episode sets exported by train_online, a 2-worker
multiprocessing build, and a build process killed with SIGKILL.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipelines"))
from episode_fixtures import (PLAYGROUND_T, PLAYGROUND_TASKS,  # noqa: E402
                              collect_playground_episodes, playground_info,
                              stored_playground_episodes, synthetic_episode, taskset_of,
                              write_set)

from wmx.cli.beam import main as beam_main  # noqa: E402
from wmx.cli.main import main as wmx_main  # noqa: E402
from wmx.datasets.readers import load_numpy, open_dataset  # noqa: E402
from wmx.datasets.store import NameResolutionError, Store  # noqa: E402
from wmx.datasets.validate import validate_dataset  # noqa: E402
from wmx.pipelines.sources import BuildInputError, make_plan, run_build  # noqa: E402
from wmx.schemas import episode as schema  # noqa: E402
from wmx.schemas.taskset import TaskInfo, mt19  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
T = PLAYGROUND_T


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Store with 2 cartpole-balance sets (3 + 3 episodes) and 1 cheetah-run set (6)."""
    home = tmp_path_factory.mktemp("home")
    cart = stored_playground_episodes("cartpole-balance")
    cheetah = stored_playground_episodes("cheetah-run")
    eps = {"cartpole-balance": [cart[:3], cart[3:]], "cheetah-run": [cheetah]}
    infos = [playground_info(t) for t in eps]
    for i, info in enumerate(infos):
        for j, e in enumerate(eps[info.name]):
            write_set(home, info, e, seed=10 * i + j)
    return home, taskset_of("tst", infos), eps


@pytest.fixture(scope="module")
def built(store, tmp_path_factory):
    """The same sources built three times: 3 shards, 3 shards in another store, 1 shard."""
    home, ts, _ = store
    d3 = run_build(make_plan(home, ts, num_shards=3))
    out = [d3]
    for shards in (3, 1):
        other = tmp_path_factory.mktemp("home")
        shutil.copytree(home / "episodes", other / "episodes")
        out.append(run_build(make_plan(other, ts, num_shards=shards)))
    return tuple(out)


def test_stored_fixture_is_two_real_tasks(store):
    _, ts, eps = store
    assert [(t.obs_dim, t.action_dim) for t in ts.tasks] == [(5, 1), (17, 6)]
    for task, sets in eps.items():
        for ep in (e for s in sets for e in s):
            assert ep["obs"].shape == (T + 1, ts.task(task).obs_dim)
            assert schema.validate_episode_rows(ep, T=T) == []
    # cartpole-balance pays ~1 per step while upright: random actions keep it up for T=20
    assert all(schema.episode_return(e) > 10 for s in eps["cartpole-balance"] for e in s)


def test_same_sources_same_hash_and_identical_shards(built):
    d3, d3b, _ = built
    assert d3.name == d3b.name
    files = sorted(p.name for p in d3.glob("shard-*"))
    assert files == sorted(p.name for p in d3b.glob("shard-*")) and len(files) == 3
    for f in files:
        assert (d3 / f).read_bytes() == (d3b / f).read_bytes()
    m, mb = (json.loads((d / "manifest.json").read_text()) for d in (d3, d3b))
    assert m["shards"] == mb["shards"] and m["episode_digests"] == mb["episode_digests"]


def test_shard_count_does_not_change_content_hash(built):
    d3, _, d1 = built
    assert d1.name == d3.name
    assert [p.name for p in d1.glob("shard-*")] == ["shard-00000-of-00001.array_record"]


def test_round_trip_every_episode_bit_identical_with_task_id(store, built):
    _, ts, eps = store
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
        for ep in (e for s in sets for e in s):
            n += 1
            tid, back = got[schema.episode_digest(ep)]
            assert tid == ts.task_id(task)
            for f in schema.EPISODE_KEYS:
                assert back[f].tobytes() == ep[f].tobytes()
    assert n == len(got) == ds.num_episodes == 12
    per = ds.manifest.per_task
    assert (per["cartpole-balance"].episodes, per["cheetah-run"].episodes) == (6, 6)
    want = [schema.episode_return(e) for e in eps["cheetah-run"][0]]
    assert per["cheetah-run"].return_mean == pytest.approx(np.mean(want), rel=1e-9)


def test_validate_passes_on_the_build(built):
    rep = validate_dataset(built[0])
    assert rep.ok, rep.format()
    assert rep.episodes_checked == 12


def test_sources_option_selects_sets(store):
    home, ts, _ = store
    sets = Store(home).list_episode_sets()
    pick = [f"{e.name}/{e.content_hash}" for e in sets if e.name != "cartpole-balance"]
    pick.append(next(e.content_hash[:12] for e in sets if e.name == "cartpole-balance"))
    plan = make_plan(home, ts, sources=pick)
    assert sorted(s.task for s in plan.sources) == ["cartpole-balance", "cheetah-run"]
    assert sum(s.num_episodes for s in plan.sources) == 9
    # <task>/<10-hex prefix>, as `wmx dataset sources` lists them, names the same sets
    short = [f"{e.name}/{e.content_hash[:10]}" for e in sets if e.name != "cartpole-balance"]
    again = make_plan(home, ts, sources=short + pick[-1:])
    assert [s.content_hash for s in again.sources] == [s.content_hash for s in plan.sources]
    with pytest.raises(BuildInputError, match="names no episode set"):   # another task's id
        make_plan(home, ts, sources=[f"cartpole-balance/{short[0].split('/')[1]}"])


@pytest.mark.parametrize("case", ["missing_task", "unknown_source", "ambiguous_source"])
def test_bad_sources_clear_error_writes_nothing(store, case):
    home, ts, _ = store
    before = sorted(p.name for p in (home / "datasets").glob("*/*"))
    if case == "missing_task":
        ts2 = taskset_of("tst2", list(ts.tasks) + [playground_info("walker-walk")])
        with pytest.raises(BuildInputError, match=r"no episode sets for task \['walker-walk'\]"):
            make_plan(home, ts2)
    elif case == "unknown_source":
        with pytest.raises(BuildInputError, match="names no episode set"):
            make_plan(home, ts, sources=["deadbeefdeadbeef"])
    else:
        with pytest.raises(BuildInputError, match="ambiguous"):
            make_plan(home, ts, sources=["cartpole-balance"])  # a task with 2 sets
    assert sorted(p.name for p in (home / "datasets").glob("*/*")) == before


def test_a_source_outside_the_taskset_names_the_way_to_add_its_task(store):
    """A source of a task the TaskSet lacks: an mt19 build adds an mt19 task with --tasks;
    a task outside mt19 needs build_taskset.py; a custom TaskSet names its file."""
    from wmx.schemas.taskset import mt19
    home, ts, _ = store
    cheetah = next(f"{e.name}/{e.content_hash}" for e in Store(home).list_episode_sets()
                   if e.name == "cheetah-run")
    only_cart = taskset_of("tst3", [ts.task("cartpole-balance")])
    with pytest.raises(BuildInputError, match=r"not in TaskSet tst3 .*add it to the TaskSet "
                                              r"file \(--taskset\)"):
        make_plan(home, only_cart, sources=[cheetah])
    sub = mt19().subset(["cartpole-balance"])
    with pytest.raises(BuildInputError, match="add it with --tasks$"):
        make_plan(home, sub, sources=[cheetah])
    from wmx.pipelines.sources import _add_task_hint
    assert _add_task_hint("probe-action", sub).startswith(
        "'probe-action' is not an mt19 task: build with pipelines/build_taskset.py")


def test_sets_of_one_task_with_different_obs_dims(tmp_path):
    a5, a6 = TaskInfo("task-a", 5, 1, T, 2, 0.9), TaskInfo("task-a", 6, 1, T, 2, 0.9)
    rng = np.random.default_rng(0)
    write_set(tmp_path, a5, [synthetic_episode(rng, T, 5, 1)], 0)
    write_set(tmp_path, a6, [synthetic_episode(rng, T, 6, 1)], 1)
    with pytest.raises(BuildInputError, match=r"disagree on \(obs dim, action dim\)"):
        make_plan(tmp_path, taskset_of("x", [a5]))
    assert not list((tmp_path / "datasets").glob("*/*"))


def test_unknown_task_name(tmp_path, capsys):
    with pytest.raises(ValueError, match="not-a-task"):
        mt19().subset(["walker-walk", "not-a-task"])
    job = str(REPO / "pipelines" / "build_mt19.py")
    assert beam_main(["run", job, "--home", str(tmp_path), "--tasks", "not-a-task"]) == 2
    assert "not-a-task" in capsys.readouterr().err


def test_unknown_and_ambiguous_hash(built, tmp_path):
    d3 = built[0]
    home = tmp_path / "h"
    other = "1" if d3.name[8] == "0" else "0"
    twin = home / "datasets" / "tst" / (d3.name[:8] + other * 56)
    shutil.copytree(d3, home / "datasets" / "tst" / d3.name)
    shutil.copytree(d3, twin)  # shares the first 8 hex digits
    store = Store(home)
    with pytest.raises(NameResolutionError, match="ambiguous") as e:
        store.resolve_dataset(f"tst@{d3.name[:8]}")
    assert len(e.value.candidates) == 2
    assert store.resolve_dataset(f"tst@{d3.name[:9]}") == home / "datasets" / "tst" / d3.name
    with pytest.raises(NameResolutionError, match="no stored version") as e:
        store.resolve_dataset("tst@ffffffff")
    assert f"tst@{d3.name[:10]}" in str(e.value)
    with pytest.raises(NameResolutionError, match="stored names: tst"):
        store.resolve_dataset("mt19@latest")
    with pytest.raises(NameResolutionError, match="at least 8 hex"):
        store.resolve_dataset("tst@abc")


def test_failure_after_the_manifest_leaves_nothing_and_rerun_succeeds(store, tmp_path,
                                                                       monkeypatch):
    """The build dies at its last step (manifest written, not yet renamed)."""
    import wmx.pipelines.transforms as tr
    home, ts, _ = store
    work = tmp_path / "h"
    shutil.copytree(home / "episodes", work / "episodes")
    real = tr.finalize

    def dying_finalize(shards, plan):
        tr.build_manifest(plan, shards).write(plan.staging_dir)
        raise RuntimeError("killed after the manifest")

    monkeypatch.setattr(tr, "finalize", dying_finalize)
    with pytest.raises(Exception, match="killed after the manifest"):
        run_build(make_plan(work, ts, num_shards=2))
    assert Store(work).list_datasets() == []
    assert [p.name for p in (work / "datasets" / ".staging").iterdir()] == []
    monkeypatch.setattr(tr, "finalize", real)
    out = run_build(make_plan(work, ts, num_shards=2))
    assert [e.path for e in Store(work).list_datasets()] == [out]


def test_corrupt_source_fails_the_build_and_writes_nothing(tmp_path):
    info = TaskInfo("task-a", 5, 1, T, 2, 0.9)
    rng = np.random.default_rng(1)
    d = write_set(tmp_path, info, [synthetic_episode(rng, T, 5, 1) for _ in range(3)], 0)
    plan = make_plan(tmp_path, taskset_of("x", [info]), num_shards=2)
    shard = next(d.glob("*.array_record"))
    shard.write_bytes(shard.read_bytes()[:-7])  # the source breaks after planning
    with pytest.raises(Exception, match="sha256"):
        run_build(plan)
    assert Store(tmp_path).list_datasets() == []
    assert not list((tmp_path / "datasets" / ".staging").iterdir())


@pytest.mark.parametrize("tmpdir_env", [True, False], ids=["TMPDIR", "no-TMPDIR"])
def test_builds_leave_no_temporaries_and_restore_the_temp_dir(store, tmp_path, monkeypatch,
                                                               tmpdir_env):
    """A build that succeeds and one that fails leave nothing in the system temporary
    directory (Beam's beam-temp* and tmp* folders go to an owned folder under
    datasets/.staging, removed after the build) and nothing in datasets/.staging; the
    process's temporary directory (tempfile.tempdir, TMPDIR) is what it was."""
    import tempfile
    home, ts, _ = store
    system_tmp = tmp_path / "tmp"
    system_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(system_tmp))
    if tmpdir_env:
        monkeypatch.setenv("TMPDIR", str(system_tmp))
    else:
        monkeypatch.delenv("TMPDIR", raising=False)
    work = tmp_path / "h"
    shutil.copytree(home / "episodes", work / "episodes")
    run_build(make_plan(work, ts, num_shards=1))
    plan = make_plan(work, ts, num_shards=2)
    shard = next((work / "episodes").glob("*/*/*.array_record"))
    shard.write_bytes(shard.read_bytes()[:-7])  # the source breaks after planning
    with pytest.raises(Exception, match="sha256"):
        run_build(plan)
    assert list(system_tmp.iterdir()) == []
    assert list((work / "datasets" / ".staging").iterdir()) == []
    assert tempfile.tempdir == str(system_tmp)
    assert os.environ.get("TMPDIR") == (str(system_tmp) if tmpdir_env else None)


def test_staging_left_by_a_killed_build_is_invisible(built):
    d3 = built[0]
    home = d3.parents[2]
    stale = home / "datasets" / ".staging" / "tst-deadbeef"
    stale.mkdir(parents=True)
    shutil.copy(d3 / "manifest.json", stale / "manifest.json")
    (stale / "shard-00000-of-00003.array_record.tmp").write_bytes(b"partial")
    try:
        assert [e.path for e in Store(home).list_datasets()] == [d3]
        assert Store(home).resolve_dataset("tst@latest") == d3
    finally:
        shutil.rmtree(stale)


def test_wmx_dataset_commands(built, capsys):
    d3 = built[0]
    home = str(d3.parents[2])
    assert wmx_main(["dataset", "--home", home, "ls"]) == 0
    out = capsys.readouterr().out
    assert "tst" in out and d3.name[:10] in out and " 12 " in out
    assert wmx_main(["dataset", "--home", home, "info", f"tst@{d3.name[:8]}"]) == 0
    out = capsys.readouterr().out
    assert "cheetah-run" in out and "lineage" in out and d3.name in out
    assert wmx_main(["dataset", "--home", home, "validate", "tst@latest"]) == 0
    assert "OK (12 episodes checked, 0 failures)" in capsys.readouterr().out
    assert wmx_main(["dataset", "--home", home, "info", "tst@ffffffffff"]) == 2
    assert "no stored version" in capsys.readouterr().err


def test_wmx_dataset_validate_fails_on_a_flipped_byte(built, tmp_path, capsys):
    d = tmp_path / "ds"
    shutil.copytree(built[0], d)
    p = sorted(d.glob("shard-*"))[0]
    raw = bytearray(p.read_bytes()); raw[len(raw) // 2] ^= 0x40; p.write_bytes(bytes(raw))
    assert wmx_main(["dataset", "validate", str(d)]) == 1
    out = capsys.readouterr().out
    assert f"[shard_digest] {p.name}" in out and "FAILED" in out


def build_taskset_job(home, ts, tmp_path, *flags) -> tuple[int, Path]:
    """Run pipelines/build_taskset.py for TaskSet ``ts`` on a copy of ``home``'s episode
    sets (in tmp_path/h); returns (exit status, the copy's home)."""
    work = tmp_path / "h"
    shutil.copytree(home / "episodes", work / "episodes")
    spec = tmp_path / "ts.json"
    spec.write_text(ts.to_json())
    job = str(REPO / "pipelines" / "build_taskset.py")
    return beam_main(["run", job, "--taskset", str(spec), "--home", str(work), *flags,
                      "--direct_num_workers=1"]), work


def test_beam_run_build_taskset_job_gives_the_same_dataset(store, built, tmp_path, capsys):
    home, ts, _ = store
    rc, work = build_taskset_job(home, ts, tmp_path, "--num_shards", "2")
    assert rc == 0
    assert f"dataset tst@{built[0].name[:10]}" in capsys.readouterr().out
    assert [e.content_hash for e in Store(work).list_datasets()] == [built[0].name]


@pytest.mark.parametrize("name,said", [
    ("mt19", "mt19 and mt19-* are the names of pipelines/build_mt19.py's datasets"),
    ("mt19-3fa2c1d0", "mt19 and mt19-* are the names of pipelines/build_mt19.py's datasets"),
    ("mt19-mine", "mt19 and mt19-* are the names of pipelines/build_mt19.py's datasets"),
    ("mt19-3fa2c1d0-T100-100", "mt19 and mt19-* are the names of pipelines/build_mt19.py's"),
    ("mine-synth", "names ending in '-synth' are synthetic datasets'"),
    ("my taskset", "TaskSet name: dataset name 'my taskset' is not valid"),
    ("x" * 101, "is not valid: use up to 100 letters"),
])
def test_build_taskset_refuses_a_name_of_other_datasets(store, tmp_path, capsys, name, said):
    """A custom TaskSet may not take a name of build_mt19.py's or synthetic datasets, nor an
    invalid one: one line, exit 2, before any Beam work (the sources would build)."""
    home, ts, _ = store
    spec = tmp_path / "ts.json"
    spec.write_text(taskset_of(name, ts.tasks).to_json())
    before = sorted(home.rglob("*"))
    job = str(REPO / "pipelines" / "build_taskset.py")
    assert beam_main(["run", job, "--taskset", str(spec), "--home", str(home)]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert line.startswith(f"error: --taskset {spec}: ") and said in line
    assert "building" not in captured.out
    assert sorted(home.rglob("*")) == before


def test_build_taskset_builds_the_offline_checks_mt19_taskset_of_other_lengths(store, tmp_path,
                                                                              capsys):
    """benchmarks/learning/offline_check.py names the mt19 TaskSet of runs that overrode T
    check-<mt19 subset name>-T<T>-<T>...: build_taskset.py builds it under that name, and
    the dataset passes validation (train_offline's check before training)."""
    import importlib.util
    home, _, _ = store
    learning = str(REPO / "benchmarks" / "learning")
    if learning not in sys.path:                  # offline_check imports its sibling check_run
        sys.path.insert(0, learning)
    spec_ = importlib.util.spec_from_file_location(
        "offline_check", REPO / "benchmarks" / "learning" / "offline_check.py")
    offline_check = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(offline_check)
    sets = {t: {"episode_sets": [str(d) for d in sorted((home / "episodes" / t).iterdir())]}
            for t in ("cartpole-balance", "cheetah-run")}
    ts, custom = offline_check.taskset_for(sets)
    sub = mt19().subset(list(sets))
    assert custom and ts.name == f"check-{sub.name}-T{T}-{T}"
    rc, work = build_taskset_job(home, ts, tmp_path)
    assert rc == 0
    assert f"dataset {ts.name}@" in capsys.readouterr().out
    (entry,) = Store(work).list_datasets()
    assert entry.name == ts.name
    from wmx.datasets.validate import validate_dataset
    rep = validate_dataset(entry.path)
    assert rep.ok, rep.format()


def test_beam_run_build_mt19_subset(tmp_path, capsys):
    """build_mt19 --tasks on episode sets with mt19's real dims and T=500 (synthetic rows)."""
    rng = np.random.default_rng(5)
    names = ["cartpole-balance", "cheetah-run"]
    for i, name in enumerate(names):
        info = mt19().task(name)
        write_set(tmp_path, info, [synthetic_episode(rng, info.episode_length, info.obs_dim,
                                                     info.action_dim) for _ in range(2)], i)
    job = str(REPO / "pipelines" / "build_mt19.py")
    assert beam_main(["run", job, "--home", str(tmp_path), "--tasks", ",".join(names)]) == 0
    (entry,) = Store(tmp_path).list_datasets()
    ds = open_dataset(entry.path, verify=True)
    assert ds.taskset == mt19().subset(names) and ds.name.startswith("mt19-")
    assert ds.num_episodes == 4 and ds.rows == 501
    assert beam_main(["run", job, "--home", str(tmp_path)]) == 2  # 17 tasks have no sets
    assert "no episode sets for tasks [" in capsys.readouterr().err


def test_beam_command_usage_errors(capsys):
    assert beam_main([]) == 2
    assert beam_main(["go", "x.py"]) == 2
    assert beam_main(["run", "no/such/job.py"]) == 2
    assert "not found" in capsys.readouterr().err


# ----------------------------------------------------------------------- slow


@pytest.mark.slow
@pytest.mark.parametrize("task", sorted(PLAYGROUND_TASKS))
def test_stored_episodes_are_what_playground_gives(task):
    """Re-collect with the real collector (one MJX compile, minutes on CPU)."""
    fresh = collect_playground_episodes(task, T, PLAYGROUND_TASKS[task])
    stored = stored_playground_episodes(task)
    assert len(fresh) == len(stored)
    for a, b in zip(fresh, stored):
        for k in schema.EPISODE_KEYS:
            np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_multiprocessing_build_is_byte_identical(store, built, tmp_path):
    home, ts, _ = store
    work = tmp_path / "h"
    shutil.copytree(home / "episodes", work / "episodes")
    d = run_build(make_plan(work, ts, num_shards=3),
                  ["--direct_num_workers=2", "--direct_running_mode=multi_processing"])
    assert d.name == built[0].name
    for p in built[0].glob("shard-*"):
        assert (d / p.name).read_bytes() == p.read_bytes()


@pytest.mark.slow
def test_build_killed_with_sigkill_leaves_no_dataset(store, tmp_path):
    """A real process killed while writing: nothing listed, a rerun succeeds."""
    home, ts, _ = store
    work = tmp_path / "h"
    shutil.copytree(home / "episodes", work / "episodes")
    spec = tmp_path / "ts.json"
    spec.write_text(ts.to_json())
    code = (
        "import os, signal, sys\n"
        "import wmx.pipelines.transforms as tr\n"
        "def die(shards, plan):\n"
        "    tr.build_manifest(plan, shards).write(plan.staging_dir)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "tr.finalize = die\n"
        "sys.path.insert(0, 'pipelines')\n"
        "from build_taskset import main\n"
        f"main(['--taskset', {str(spec)!r}, '--home', {str(work)!r}, '--num_shards', '2'])\n")
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, timeout=600,
                       capture_output=True)
    assert r.returncode == -signal.SIGKILL
    assert list((work / "datasets" / ".staging").iterdir())  # the dead build's leftovers
    assert Store(work).list_datasets() == []
    out = run_build(make_plan(work, ts, num_shards=2))
    assert [e.path for e in Store(work).list_datasets()] == [out]
    assert validate_dataset(out).ok


@pytest.mark.slow
def test_build_from_train_online_episode_sets(tmp_path):
    """Episode sets exported by train_online (tiny preset) on two tasks of
    different dims pool into a dataset that validates."""
    from wmx.train_online.cli import main as train_main
    names = ["cartpole-balance", "cheetah-run"]
    for name in names:
        assert train_main(["--task", name, "--preset", "tiny", "--episode-length", "30",
                           "--seed-steps", "30", "--env-steps", "180", "--chunk-episodes", "3",
                           "--eval-every", "180", "--eval-episodes", "1", "--home",
                           str(tmp_path), "--name", name, "--no-progress"]) in (0, None)
    sets = Store(tmp_path).list_episode_sets()
    assert sorted({e.name for e in sets}) == names
    infos = [playground_info(n, 30) for n in names]
    out = run_build(make_plan(tmp_path, taskset_of("online", infos), num_shards=2))
    rep = validate_dataset(out)
    assert rep.ok, rep.format()
    from wmx.schemas.manifest import EpisodeSetManifest
    n = sum(EpisodeSetManifest.load(e.path).episode_count for e in sets)
    assert n > 0 and rep.episodes_checked == open_dataset(out).num_episodes == n


def test_dataset_sources_lists_what_a_build_can_pool(store, capsys):
    """`wmx dataset sources [TASK]`: every episode set (task, 10-hex id, episodes, mean
    return, producer), the ids in the form --sources takes."""
    home, _, eps = store
    assert wmx_main(["dataset", "sources", "--home", str(home)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["TASK", "SET", "EPISODES", "MEAN", "RETURN", "PRODUCER", "CREATED"]
    rows = [ln.split() for ln in out[1:-1]]
    sets = Store(home).list_episode_sets()
    assert [(r[0], r[1]) for r in rows] == [(e.name, e.content_hash[:10]) for e in sets]
    assert sorted(int(r[2]) for r in rows) == [3, 3, 6]
    cheetah = next(r for r in rows if r[0] == "cheetah-run")
    want = np.mean([schema.episode_return(e) for e in eps["cheetah-run"][0]])
    assert float(cheetah[3]) == pytest.approx(want, abs=0.05)
    assert "--sources TASK/SET" in out[-1]
    assert wmx_main(["dataset", "sources", "cheetah-run", "--home", str(home)]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3          # head, one set, hint
    assert wmx_main(["dataset", "sources", "walker-walk", "--home", str(home)]) == 0
    assert "no episode sets of walker-walk" in capsys.readouterr().out
    assert wmx_main(["dataset", "sources", "walker-wlak", "--home", str(home)]) == 2
    assert "unknown task 'walker-wlak'" in capsys.readouterr().err


def test_dataset_sources_marks_a_set_under_another_name(store, tmp_path, capsys):
    home, _, _ = store
    other = tmp_path / "h"
    shutil.copytree(home / "episodes", other / "episodes")
    src = next((other / "episodes" / "cheetah-run").iterdir())
    src.rename(src.parent / ("f" * 64))                      # not its content hash
    assert wmx_main(["dataset", "sources", "cheetah-run", "--home", str(other)]) == 0
    assert "(not the set its folder names: the build refuses it)" in capsys.readouterr().out
    (src.parent / ("f" * 64)).rename(src.parent / "backup")  # not a hash: not listed, said
    assert wmx_main(["dataset", "sources", "--home", str(other)]) == 0
    out = capsys.readouterr().out
    assert "cheetah-run" not in out.split("pool some")[0].split("\n", 1)[1]
    assert "note: 1 folder under" in out and "cheetah-run/backup" in out


def test_dataset_ls_says_which_folders_it_leaves_out(store, built, tmp_path, capsys):
    home, d3 = store[0], Path(built[0])
    other = tmp_path / "h"
    shutil.copytree(home / "datasets", other / "datasets")
    rel = d3.relative_to(home / "datasets")                  # <name>/<hash>
    (other / "datasets" / rel).rename(other / "datasets" / rel.parent / "renamed")
    assert wmx_main(["dataset", "ls", "--home", str(other)]) == 0
    out = capsys.readouterr().out
    assert f"note: 1 folder under {other / 'datasets'}" in out
    assert f"{rel.parent}/renamed" in out
    assert wmx_main(["dataset", "ls", "--home", str(home)]) == 0
    assert "note:" not in capsys.readouterr().out
