"""Synthetic mt80-shaped datasets (wmx.datasets.synth, `wmx dataset synth`):
validate passes, the TaskSet is mt80-like, the bytes equal a Beam build of the
same episodes, the writer is deterministic, bad input writes nothing."""
from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipelines"))
from episode_fixtures import write_set  # noqa: E402

from wmx.cli.main import main as wmx_main  # noqa: E402
from wmx.datasets.readers import open_dataset, stream_slices  # noqa: E402
from wmx.datasets.store import Store  # noqa: E402
from wmx.datasets.synth import (MT19_DIMS, METAWORLD_DIMS, SynthError,  # noqa: E402
                                estimated_bytes, mt80_like_taskset, synthetic_episode,
                                write_synthetic_dataset)
from wmx.schemas import episode as schema  # noqa: E402
from wmx.schemas.hashing import dataset_content_hash  # noqa: E402

T = 20


def test_mt80_like_taskset_dims():
    ts = mt80_like_taskset()
    assert len(ts) == 80 and len(set(ts.names)) == 80
    dims = [(t.obs_dim, t.action_dim) for t in ts.tasks]
    assert dims[:19] == list(MT19_DIMS) and dims[19:30] == list(MT19_DIMS[:11])
    assert dims[30:] == [METAWORLD_DIMS] * 50
    assert (ts.max_obs_dim, ts.max_action_dim) == (39, 6)
    assert {t.episode_length for t in ts.tasks} == {500}


def test_mt19_dims_copy_matches_the_registry():
    from wmx.schemas.taskset import mt19
    assert tuple((t.obs_dim, t.action_dim) for t in mt19().tasks) == MT19_DIMS


def test_synth_command_writes_a_dataset_that_validates(tmp_path, capsys):
    rows = 150 * (T + 1) - 5  # 150 episodes, the last one only partly asked for
    assert wmx_main(["dataset", "--home", str(tmp_path), "synth", "--rows", str(rows),
                     "--episode-length", str(T), "--num-shards", "3", "--seed", "7"]) == 0
    out = capsys.readouterr().out
    (entry,) = Store(tmp_path).list_datasets()
    assert f"dataset mt80-synth@{entry.content_hash[:10]}" in out
    assert wmx_main(["dataset", "--home", str(tmp_path), "validate", "mt80-synth@latest"]) == 0
    assert "OK (150 episodes checked, 0 failures)" in capsys.readouterr().out
    ds = open_dataset(entry.path, verify=True)
    assert ds.num_episodes == 150 and ds.rows == T + 1 and len(ds.manifest.shards) == 3
    ts = ds.taskset
    assert len(ts) == 80 and (ts.max_obs_dim, ts.max_action_dim) == (39, 6)
    # the content hash is the build's: TaskSet + digests of the unpadded episodes
    eps = [synthetic_episode(7, i, ts.tasks[i % 80]) for i in range(150)]
    assert entry.content_hash == dataset_content_hash(ts, [schema.episode_digest(e)
                                                           for e in eps])
    counts = {t: ds.manifest.per_task[t].episodes for t in ts.names}
    assert counts["synth-00"] == 2 and counts["synth-79"] == 1 and sum(counts.values()) == 150
    want = np.mean([schema.episode_return(eps[i]) for i in (3, 83)])
    assert ds.manifest.per_task["synth-03"].return_mean == pytest.approx(want, rel=1e-9)
    b = next(stream_slices(ds, 64, 3, seed=0, num_threads=1))
    assert b["obs"].shape == (4, 64, 39) and b["action"].shape == (3, 64, 6)


def test_synth_equals_a_beam_build_of_the_same_episodes(tmp_path):
    """Episode sets holding the generator's episodes, pooled by the Beam build
    with the same shard count: same hash, byte-identical shards."""
    from wmx.pipelines.sources import make_plan, run_build
    n_tasks, n = 4, 14
    r = write_synthetic_dataset(tmp_path / "synth", n * (T + 1), num_tasks=n_tasks,
                                episode_length=T, seed=3, num_shards=2)
    ts = mt80_like_taskset(n_tasks, T)
    home = tmp_path / "beam"
    for k, task in enumerate(ts.tasks):
        write_set(home, task, [synthetic_episode(3, i, task) for i in range(k, n, n_tasks)], k)
    built = run_build(make_plan(home, ts, num_shards=2))
    assert built.name == r.content_hash
    files = sorted(p.name for p in r.path.glob("shard-*"))
    assert files == sorted(p.name for p in built.glob("shard-*")) and len(files) == 2
    for f in files:
        assert (r.path / f).read_bytes() == (built / f).read_bytes()
    a, b = (json.loads((d / "manifest.json").read_text()) for d in (r.path, built))
    assert a["per_task"] == b["per_task"] and a["shards"] == b["shards"]


def test_synth_is_deterministic_and_keeps_an_existing_copy(tmp_path):
    a = write_synthetic_dataset(tmp_path / "a", 30 * (T + 1), episode_length=T, seed=1)
    b = write_synthetic_dataset(tmp_path / "b", 30 * (T + 1), episode_length=T, seed=1)
    c = write_synthetic_dataset(tmp_path / "a", 30 * (T + 1), episode_length=T, seed=1)
    d = write_synthetic_dataset(tmp_path / "a", 30 * (T + 1), episode_length=T, seed=2)
    assert a.content_hash == b.content_hash == c.content_hash != d.content_hash
    assert c.path == a.path and a.episodes == math.ceil(30 * (T + 1) / (T + 1)) == 30
    for p in a.path.glob("shard-*"):
        assert (b.path / p.name).read_bytes() == p.read_bytes()
    assert not any((tmp_path / "a" / "datasets" / ".staging").iterdir())


@pytest.mark.parametrize("kwargs, match", [
    ({"rows": 5}, r"less than one episode \(21 rows\)"),
    ({"rows": 100, "name": "a/b-synth"}, "dataset name 'a/b-synth' is not valid"),
    ({"rows": 100, "name": "big synth"}, "dataset name 'big synth' is not valid"),
    ({"rows": 100, "name": ".hidden-synth"}, "is not valid"),
    ({"rows": 100, "name": "x" * 95 + "-synth"}, "up to 100 letters"),
    ({"rows": 100, "name": "mt19"}, "names of real mt19 builds"),
    ({"rows": 100, "name": "mt19-3fa2c1d0"}, "names of real mt19 builds"),
    ({"rows": 100, "name": "mt19-x-synth"}, "names of real mt19 builds"),
    ({"rows": 100, "name": "mt80"}, "ends in '-synth'.*use --name mt80-synth"),
    ({"rows": 100, "num_tasks": 0}, "--tasks must be >= 1"),
    ({"rows": 100, "num_shards": 0}, "--num-shards must be >= 1, got 0"),
    ({"rows": 10 ** 12}, "are free under"),
])
def test_synth_bad_input_writes_nothing(tmp_path, kwargs, match):
    with pytest.raises(SynthError, match=match):
        write_synthetic_dataset(tmp_path, episode_length=T, **kwargs)
    assert Store(tmp_path).list_datasets() == []
    assert not list((tmp_path / "datasets").glob(".staging/*"))


def test_synth_command_error_is_one_line(tmp_path, capsys):
    assert wmx_main(["dataset", "--home", str(tmp_path), "synth", "--rows", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --rows 3 is less than one episode") and "\n" not in err


def test_synth_command_refuses_a_real_name_and_writes_nothing(tmp_path, capsys):
    assert wmx_main(["dataset", "--home", str(tmp_path), "synth", "--rows", "100",
                     "--episode-length", str(T), "--name", "mt19"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --name mt19: mt19 and mt19-* are the names of real mt19 "
                          "builds") and "\n" not in err
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


@pytest.mark.parametrize("flag, value, match", [
    ("--num-shards", "0", "argument --num-shards: 0 must be at least 1"),
    ("--rows", "1.5", "argument --rows: '1.5' is not a whole number"),
    ("--rows", "lots", "argument --rows: 'lots' is not an integer"),
    ("--tasks", "0", "argument --tasks: 0 must be at least 1"),
])
def test_synth_command_refuses_bad_counts(tmp_path, capsys, flag, value, match):
    argv = ["dataset", "--home", str(tmp_path), "synth", "--rows", "100", flag, value]
    with pytest.raises(SystemExit) as e:
        wmx_main(argv)
    assert e.value.code == 2 and match in capsys.readouterr().err
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_synth_command_takes_counts_in_scientific_notation(tmp_path, capsys):
    assert wmx_main(["dataset", "--home", str(tmp_path), "synth", "--rows", "1e3",
                     "--episode-length", str(T), "--tasks", "2", "--num-shards", "2e0"]) == 0
    (entry,) = Store(tmp_path).list_datasets()
    ds = open_dataset(entry.path)
    assert ds.num_episodes == math.ceil(1000 / (T + 1)) and len(ds.manifest.shards) == 2
    assert ds.manifest.builder["rows_requested"] == 1000


@pytest.mark.parametrize("episodes, num_tasks, num_shards", [(5, 2, 1), (150, 80, 3)])
def test_size_estimate_covers_what_is_written(tmp_path, episodes, num_tasks, num_shards):
    r = write_synthetic_dataset(tmp_path, episodes * (T + 1), num_tasks=num_tasks,
                                episode_length=T, num_shards=num_shards)
    on_disk = sum(f.stat().st_size for f in r.path.iterdir())
    est = estimated_bytes(mt80_like_taskset(num_tasks, T), episodes, num_shards)
    assert on_disk <= est <= 2 * on_disk


def test_full_disk_message_gives_a_small_size_in_its_unit(tmp_path, monkeypatch):
    """A small dataset's need is printed in KiB (it said "0.0 GB")."""
    import shutil
    monkeypatch.setattr(shutil, "disk_usage",
                        lambda path: shutil._ntuple_diskusage(10 ** 9, 10 ** 9 - 1000, 1000))
    with pytest.raises(SynthError, match=r"5 episodes need about 1\d\d\.\d KiB, only 1000 B "
                                         r"are free under"):
        write_synthetic_dataset(tmp_path, 5 * (T + 1), num_tasks=2, episode_length=T)
    assert not (tmp_path / "datasets").exists()


def test_synth_staging_is_owned_and_a_dead_ones_is_swept(tmp_path):
    """A killed synth's staging folder is removed by the next stage (wmx.temporaries)."""
    import subprocess
    from wmx import temporaries
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    stale = (tmp_path / "datasets" / ".staging" /
             f"mt80-synth~{temporaries._host()}~{p.pid}~0123abcd")
    stale.mkdir(parents=True)
    seen = []
    write_synthetic_dataset(tmp_path, 3 * (T + 1), num_tasks=2, episode_length=T,
                            progress=lambda _: seen.extend(q.name for q in stale.parent.iterdir()))
    assert seen and all(temporaries.owner(n) == (temporaries._host(), os.getpid())
                        for n in seen)
    assert not stale.exists() and not any(stale.parent.iterdir())
