"""benchmarks/learning/dreamerv3_offline.py's --set (no training): the check's model, kept on
resume, checked against the pooled tasks' model, and the offline terms in the result."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from offline_check_stand_ins import _METRICS, _prepared_run, bench


def test_set_gives_the_checks_model_and_is_kept_on_resume(tmp_path, capsys):
    """--set fields go into the run's config (checked before any dataset is built: a typo
    is one line naming the field); a resume must repeat them as saved or leave them out;
    the result records them."""
    home = tmp_path / "home"
    run = _prepared_run(home)
    out = str(tmp_path / "out")
    with pytest.raises(SystemExit, match="'unitz': did you mean 'units'"):
        bench.main(["--sources", str(home / "runs" / "src"), "--home", str(home),
                    "--set", "unitz=128", "--out", out])
    with pytest.raises(SystemExit, match=r"takes .*integer"):
        bench.main(["--sources", str(home / "runs" / "src"), "--home", str(home),
                    "--set", "units=wide", "--out", out])
    for item, flag in (("preset=paper", "--preset"), ("batch_size=8", "--batch-size")):
        with pytest.raises(SystemExit, match=f"--set {item.split('=')[0]}: give {flag}"):
            bench.main(["--sources", str(home / "runs" / "src"), "--home", str(home),
                        "--set", item, "--out", out])
    assert sorted(p.name for p in (home / "runs").iterdir()) == ["dv3-offline-check-1", "src"]
    assert not (home / "datasets").exists()              # refused before the build
    assert not Path(out).exists()                        # and before --out is made
    (run / "metrics.csv").write_text(_METRICS)
    with pytest.raises(SystemExit, match=r"units=128 conflicts with the run's saved "
                                         r"units=64 \(the preset's\)"):
        bench.main(["--resume", str(run), "--report-only", "--out", out, "--set", "units=128"])
    assert bench.main(["--resume", str(run), "--report-only", "--out", out,   # the preset's
                       "--set", "units=64"]) == 0
    with pytest.raises(SystemExit, match="no field 'unitz'; did you mean 'units'"):
        bench.main(["--resume", str(run), "--report-only", "--out", out, "--set", "unitz=64"])
    cfg = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**cfg, "agent_overrides": {"units": 128}}))
    assert bench.main(["--resume", str(run), "--report-only", "--out", out,
                       "--set", "units=128"]) == 0
    assert json.loads((Path(out) / "dreamerv3_offline.json").read_text())[
        "agent_overrides"] == {"units": 128}
    assert bench.main(["--resume", str(run), "--report-only", "--out", out]) == 0
    with pytest.raises(SystemExit, match="units=64 conflicts with the run's saved units=128"):
        bench.main(["--resume", str(run), "--report-only", "--out", out, "--set", "units=64"])
    with pytest.raises(SystemExit, match=r"deter=None conflicts .* deter=512 \(the preset's\)"):
        bench.main(["--resume", str(run), "--report-only", "--out", out, "--set", "deter=null"])


def test_set_is_checked_against_the_pooled_tasks_model():
    """The early check builds the config of the pooled tasks' TaskSet, as the run will (not
    a single-task config): offline TD-MPC2 is the multi-task model even on one task
    (num_tasks 1), so task_dim 0 is refused before any dataset is built."""
    import argparse

    import offline_check
    from wmx.agents.registry import get_agent
    from wmx.envs.registry import get_task
    args = argparse.Namespace(preset="cpu", set_=["task_dim=0"], seeds=[0], updates=None,
                              batch_size=256, eval_every=1000, log_every=500, eval_episodes=2)
    get_agent("tdmpc2").make_config("cpu", {"task_dim": 0}, task=get_task("cartpole-balance"))
    for tasks in (["cartpole-balance"], ["cartpole-balance", "reacher-easy"]):
        with pytest.raises(SystemExit, match="task_dim=0: multi-task"):
            offline_check.check_overrides("tdmpc2", args, tasks, None)
    args.set_ = ["task_dim=32"]
    offline_check.check_overrides("tdmpc2", args, ["cartpole-balance", "reacher-easy"], None)


def test_the_offline_terms_pass_through_set_into_the_result(tmp_path):
    """The offline terms (W-D10, W-D11) are --set fields like any other: a bad value is
    refused in one line before anything is built, a run made with them records them in
    the result's agent_overrides beside the verdict, and a resume must keep them."""
    home = tmp_path / "home"
    run = _prepared_run(home)
    out = str(tmp_path / "out")
    with pytest.raises(SystemExit) as info:
        bench.main(["--sources", str(home / "runs" / "src"), "--home", str(home),
                    "--set", "offline_bc_weight=-0.5", "--out", out])
    msg = str(info.value)
    assert len(msg.splitlines()) == 1 and "offline_bc_weight=-0.5: must be >= 0" in msg
    with pytest.raises(SystemExit, match="offline_penalty_weight=1.0 needs .*offline_ensemble"):
        bench.main(["--sources", str(home / "runs" / "src"), "--home", str(home),
                    "--set", "offline_penalty_weight=1.0", "--out", out])
    assert not (home / "datasets").exists() and not Path(out).exists()
    terms = {"offline_bc_weight": 0.3, "offline_ensemble": 5, "offline_penalty_weight": 1.0}
    cfg = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**cfg, "agent_overrides": terms}))
    (run / "metrics.csv").write_text(_METRICS)
    sets = [a for k, v in terms.items() for a in ("--set", f"{k}={v}")]
    assert bench.main(["--resume", str(run), "--report-only", "--out", out, *sets]) == 0
    res = json.loads((Path(out) / "dreamerv3_offline.json").read_text())
    assert res["agent_overrides"] == terms and res["passed"] is True
    with pytest.raises(SystemExit, match=r"offline_bc_weight=0.5 conflicts with the run's "
                                         r"saved offline_bc_weight=0.3"):
        bench.main(["--resume", str(run), "--report-only", "--out", out,
                    "--set", "offline_bc_weight=0.5"])
