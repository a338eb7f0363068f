"""Fault injection, section 3 of issue 15's classes (docs/reliability.md counts them).

3. Interrupted runs: metrics rows, stale temporaries, reports moved aside.

The training cases reuse the session's tiny runs (their programs are compiled once per
session, tests/tiny_runs.py). The kill test is test_kill.py (slow).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from faults_common import _rows
from tiny_runs import TINY_RC

from wmx import temporaries
from wmx.datasets.store import Store
from wmx.evaluate import cli as evaluate_cli


# ---- 3. interrupted runs --------------------------------------------------------------------
class Killed(BaseException):
    """Stands in for SIGKILL in-process (test_kill.py sends the real one)."""


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
