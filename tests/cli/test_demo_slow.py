"""The real `wmx demo`, end to end at a trivially small scale (slow: one MJX compile
per task and program, several minutes of CPU)."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from wmx.cli import demo, main as wmx_main

pytestmark = pytest.mark.slow

TASKS = "reacher-easy,cartpole-balance"     # mt30 order; (obs, action) = (6, 2) and (5, 1)
FLAGS = ["--tasks", TASKS, "--env-steps", "1000", "--seed-steps", "500", "--updates", "2",
         "--batch-size", "16", "--preset", "tiny", "--num-samples", "32", "--eval-episodes", "1"]


def test_real_demo_runs_every_stage_then_skips_them(tmp_path, capsys):
    home = tmp_path / "h"
    assert wmx_main.main(["demo", "--home", str(home), *FLAGS]) == 0
    out = capsys.readouterr().out
    for i, title in enumerate(["train_online reacher-easy", "train_online cartpole-balance",
                               "beam build", "train_offline", "evaluate"], 1):
        assert f"=== stage {i}/5: {title}" in out
    # every stage's product is in the store
    runs = sorted(p.name for p in (home / "runs").iterdir())
    assert sum(r.startswith("demo-online-") for r in runs) == 2
    off = [home / "runs" / r for r in runs if r.startswith("demo-offline-")]
    assert len(off) == 1
    cfg = json.loads((off[0] / "config.json").read_text())
    assert [t["name"] for t in cfg["taskset"]["tasks"]] == TASKS.split(",")
    summary = json.loads((off[0] / "summary.json").read_text())
    assert summary["finished"] and set(summary["final_eval"]) == set(TASKS.split(","))
    report = off[0] / "report"
    assert (report / "report.md").is_file() and (report / "scores.png").is_file()
    assert f"report:         {report / 'report.md'}" in out
    # a rerun skips every stage
    buf = io.StringIO()
    import argparse
    p = argparse.ArgumentParser()
    demo.add_arguments(p)
    res = demo.run_pipeline(p.parse_args(["--home", str(home), *FLAGS]), home, out=buf)
    assert [s["status"] for s in res["stages"]] == ["done"] * 5
    assert res["offline_run"] == str(off[0])
