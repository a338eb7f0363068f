"""benchmarks/learning/dreamerv3_offline.py's --pack (no training): what it copies for
training elsewhere, and what it refuses before anything is prepared."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from offline_check_stand_ins import _METRICS, _prepared_run, bench


def test_pack_copies_what_training_elsewhere_needs(tmp_path, capsys):
    """--resume RUN --pack DIR: a home folder of its own (the run, its dataset, the source
    runs' small files; no episode sets), whole or absent, from which the run reports."""
    home = tmp_path / "home"
    run = _prepared_run(home)
    ds = home / "datasets" / "mt19-x" / ("ab" * 32)
    ds.mkdir(parents=True)
    (ds / "manifest.json").write_text("{}")
    (ds / "shard-00000-of-00001.array_record").write_bytes(b"\0" * 100)
    (home / "episodes" / "reacher-easy" / "set").mkdir(parents=True)
    (home / "runs" / "src" / "checkpoints").mkdir()
    out = str(tmp_path / "out")
    dest = tmp_path / "pack"
    assert bench.main(["--resume", str(run), "--pack", str(dest), "--out", out]) == 0
    assert "--resume" in capsys.readouterr().out
    files = sorted(str(f.relative_to(dest)) for f in dest.rglob("*") if f.is_file())
    assert files == [f"datasets/mt19-x/{'ab' * 32}/manifest.json",
                     f"datasets/mt19-x/{'ab' * 32}/shard-00000-of-00001.array_record",
                     "runs/dv3-offline-check-1/benchmark.json",
                     "runs/dv3-offline-check-1/config.json",
                     "runs/src/config.json", "runs/src/metrics.csv", "runs/src/summary.json"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    with pytest.raises(SystemExit, match="it exists; give a new folder"):
        bench.main(["--resume", str(run), "--pack", str(dest), "--out", out])
    packed = dest / "runs" / "dv3-offline-check-1"
    (packed / "metrics.csv").write_text(_METRICS)       # trained on the other machine
    assert bench.main(["--resume", str(packed), "--report-only", "--out", out]) == 0
    res = json.loads((Path(out) / "dreamerv3_offline.json").read_text())
    assert res["tasks"]["reacher-easy"]["source_runs"] == ["runs/src"]
    (packed / "checkpoints" / "1000").mkdir(parents=True)
    (packed / "checkpoints" / "1000" / "host.json").write_text("{}")   # a complete one
    with pytest.raises(SystemExit, match="has trained already"):
        bench.main(["--resume", str(packed), "--pack", str(tmp_path / "p2"), "--out", out])
    shutil.rmtree(ds)
    with pytest.raises(SystemExit, match="dataset mt19-x@abababab.. is not in"):
        bench.main(["--resume", str(run), "--pack", str(tmp_path / "p3"), "--out", out])
    assert not (tmp_path / "p2").exists() and not (tmp_path / "p3").exists()


def test_pack_refuses_before_anything_is_prepared_and_packs_the_tdmpc2_run(tmp_path):
    home = tmp_path / "home"
    run = _prepared_run(home)
    ds = home / "datasets" / "mt19-x" / ("ab" * 32)
    ds.mkdir(parents=True)
    (ds / "manifest.json").write_text("{}")
    out = str(tmp_path / "out")
    taken = tmp_path / "taken"
    taken.mkdir()
    runs_before = sorted(p.name for p in (home / "runs").iterdir())
    for dest, msg in [(taken, "it exists"), (home / "runs" / "p", "inside the home folder"),
                      (ds / "pack", "inside the home folder"), (taken / "x" / "y", None)]:
        if msg is None:                            # a file where a parent folder should be
            (taken / "x").write_text("")
            msg = "is not a folder"
        with pytest.raises(SystemExit, match=msg):   # a new run: refused before the build
            bench.main(["--home", str(home), "--sources", str(home / "runs" / "src"),
                        "--prepare-only", "--pack", str(dest), "--out", out])
        with pytest.raises(SystemExit, match=msg):
            bench.main(["--resume", str(run), "--pack", str(dest), "--out", out])
    assert sorted(p.name for p in (home / "runs").iterdir()) == runs_before
    # the TD-MPC2 run beside, recorded in benchmark.json: its files and report/ travel
    b = json.loads((run / "benchmark.json").read_text())
    (run / "benchmark.json").write_text(json.dumps({**b, "tdmpc2_run": "runs/td"}))
    with pytest.raises(SystemExit, match=r"the runs \['runs/td'\] recorded in .* are not in"):
        bench.main(["--resume", str(run), "--pack", str(tmp_path / "p1"), "--out", out])
    (home / "runs" / "td" / "report").mkdir(parents=True)
    (home / "runs" / "td" / "config.json").write_text("{}")
    (home / "runs" / "td" / "report" / "report.md").write_text("# report\n")
    (home / "runs" / "td" / "model.ckpt").write_text("not packed")
    assert bench.main(["--resume", str(run), "--pack", str(tmp_path / "p2"), "--out", out]) == 0
    p2 = tmp_path / "p2"
    assert sorted(f.name for f in (p2 / "runs" / "td").rglob("*") if f.is_file()) == [
        "config.json", "report.md"]
    umask = os.umask(0)
    os.umask(umask)
    assert p2.stat().st_mode & 0o777 == 0o777 & ~umask
    assert not (tmp_path / "p1").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_pack_prepared_on_a_cpu_names_what_an_accelerator_would_choose(tmp_path, capsys):
    """The fields a preset leaves "auto" are fixed by the CPU that prepares the run and kept
    wherever it trains (wmx.runs.pins): packing says which, and the --set that gives the
    accelerator's; with them given (or on an accelerator) it says nothing."""
    from wmx.agents.dreamerv3.config import backend_choices
    assert backend_choices("paper", {}, "cpu") == {"scan_weight_grads": "inside"}
    assert backend_choices("paper", {}, "tpu") == {"scan_weight_grads": "outside"}
    assert backend_choices("cpu", {"compute_dtype": "float32"}, "tpu") == \
        {"scan_weight_grads": "outside"}
    assert backend_choices("cpu", {"compute_dtype": "auto", "scan_weight_grads": "inside"},
                           "gpu") == {"compute_dtype": "bfloat16"}
    home = tmp_path / "home"
    run = _prepared_run(home)                     # preset cpu, no overrides
    ds = home / "datasets" / "mt19-x" / ("ab" * 32)
    ds.mkdir(parents=True)
    (ds / "manifest.json").write_text("{}")
    capsys.readouterr()
    assert bench.main(["--resume", str(run), "--pack", str(tmp_path / "p"),
                       "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert ("note: this CPU fixed compute_dtype=float32, scan_weight_grads=inside for the run"
            in out) and "--set compute_dtype=bfloat16 --set scan_weight_grads=outside" in out
    assert bench.accelerator_note(run, backend="tpu") is None
    cfg = json.loads((run / "config.json").read_text())
    cfg["agent_overrides"] = {"compute_dtype": "bfloat16", "scan_weight_grads": "outside"}
    (run / "config.json").write_text(json.dumps(cfg))
    assert bench.accelerator_note(run, backend="cpu") is None
