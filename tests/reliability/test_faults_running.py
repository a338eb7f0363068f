"""Fault injection, sections 5 and 6 of issue 15's classes (docs/reliability.md counts them).

5. Expected failures while running (home, disk, memory): one line, exit 1,
   nothing a rerun trips over.
6. Non-finite values stop a run, naming where, keeping the last checkpoint.

The training cases reuse the session's tiny runs (their programs are compiled once per
session, tests/tiny_runs.py); the forged batch is `faults_common.forge`'s.
"""
from __future__ import annotations

import errno
import json
from pathlib import Path

import numpy as np
import pytest

from faults_common import _one_line, _rows, forge
from tiny_runs import T as TINY_T, TINY_OFFLINE_ARGS, TINY_ONLINE_ARGV, TINY_RC

from wmx.train_offline import cli as offline_cli
from wmx.train_online import cli as online_cli


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
