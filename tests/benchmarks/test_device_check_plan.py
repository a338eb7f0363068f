"""benchmarks/device_check.py's plan: it fits 10 minutes, its stages' commands run the paper
sizes and the whole parity suite, ``--only`` and ``--total-s`` share the budget, bad input
is refused, and a prepared DreamerV3 offline run adds the offline stage."""
import json
from pathlib import Path

import pytest

from device_check_common import DEFAULT, SCRIPT, _budgets, _run, device_check


@pytest.mark.parametrize("force_cpu", [False, True])
def test_plan_budgets_sum_to_the_total_within_600_s(force_cpu):
    r = _run("--plan", *(["--force-cpu"] if force_cpu else []))
    assert r.returncode == 0, r.stderr
    budgets = _budgets(r.stdout)
    total = budgets.pop("total")
    assert list(budgets) == DEFAULT        # the learning stages only when named
    assert abs(sum(budgets.values()) + device_check.FINISH_RESERVE_S - total) < 0.5
    assert device_check.DEFAULT_TOTAL_S - 0.5 < total <= device_check.DEFAULT_TOTAL_S <= 600
    for name in ("tdmpc2_learning", "dreamerv3_learning"):
        line = next(ln for ln in r.stdout.splitlines() if ln.lstrip().startswith(name))
        assert f"(only with --only {name})" in line
    assert ("--preset tiny" if force_cpu else "--preset paper") in r.stdout
    bf16 = next(ln for ln in r.stdout.splitlines() if "dreamerv3_speed_bf16" in ln)
    f32 = next(ln for ln in r.stdout.splitlines() if "dreamerv3_speed_f32" in ln)
    assert "--compute-dtype bfloat16" in bf16 and "--compute-dtype" not in f32


def test_paper_sizes_and_the_parity_suite_in_the_plan(tmp_path):
    plan = {s.name: s for s in device_check.stages(tmp_path / "raw", tmp_path / "home", False,
                                                   shared=tmp_path / "shared")}
    td, dv = plan["tdmpc2_speed"].argv, plan["dreamerv3_speed_f32"].argv
    assert td[td.index("--sizes") + 1:td.index("--sizes") + 2] == ["5"]
    assert dv[dv.index("--sizes") + 1:dv.index("--sizes") + 2] == ["12m"]
    assert dv[dv.index("--seeds") + 1:dv.index("--seeds") + 4] == ["1", "2", "5"]
    assert "--online-presets" in dv      # no online worker: one process on the chip at a time
    par = plan["parity"]
    files = {Path(a).name for a in par.argv if a.endswith(".py")}
    on_disk = {p.name for p in (SCRIPT.parents[1] / "tests").rglob("test_*parity*.py")}
    assert files == on_disk and len(files) >= 10
    assert par.argv[par.argv.index("-m", 3) + 1] == "parity" and "-p" in par.argv
    assert par.env["JAX_DEFAULT_MATMUL_PRECISION"] == "highest"
    assert par.env["JAX_PLATFORMS"] is None and par.env["WMX_SHARED"] == str(tmp_path / "shared")
    for name in ("tdmpc2_learning", "dreamerv3_learning"):
        a = plan[name].argv
        assert a[a.index("--preset") + 1] == "paper" and not plan[name].default
        assert a[a.index("--task") + 1] == device_check.TASK


def test_only_gives_the_named_stages_the_whole_budget():
    r = _run("--plan", "--only", "dreamerv3_learning", "--dreamerv3-task", "reacher-easy")
    assert r.returncode == 0, r.stderr
    dv = next(ln for ln in r.stdout.splitlines() if ln.lstrip().startswith("dreamerv3_learning"))
    td = next(ln for ln in r.stdout.splitlines() if ln.lstrip().startswith("tdmpc2_learning"))
    assert "--task reacher-easy" in dv and "--preset paper" in dv and "(skipped)" not in dv
    assert "--seeds 0 1 " in dv and "--chunk-ticks" in dv   # the criterion's 2 seeds
    assert f"--task {device_check.TASK}" in td and "(skipped)" in td
    budgets = _budgets(r.stdout)
    assert list(budgets) == ["probe", "dreamerv3_learning", "total"]
    assert abs(budgets["dreamerv3_learning"] - (device_check.DEFAULT_TOTAL_S
               - device_check.FINISH_RESERVE_S - budgets["probe"])) <= 0.5
    r = _run("--plan", "--only", "parity", "tdmpc2_speed", "dreamerv3_speed_f32",
             "dreamerv3_speed_bf16", "--total-s", "300")
    budgets = _budgets(r.stdout)
    assert list(budgets) == ["probe", "parity", "tdmpc2_speed", "dreamerv3_speed_f32",
                             "dreamerv3_speed_bf16", "total"]
    assert abs(budgets["total"] - 300) < 0.5 and "device_tests" in r.stdout


def test_total_s_scales_the_budgets_and_bad_input_is_refused(tmp_path):
    r = _run("--plan", "--total-s", "300")
    assert abs(_budgets(r.stdout)["total"] - 300) < 0.5
    r = _run("--plan", "--only", "tdmpc2_speed", "nope")
    assert r.returncode == 2 and "unknown stage(s) ['nope']" in r.stderr
    r = _run("--plan", "--total-s", "45")
    assert r.returncode == 2 and "--total-s 45: give at least 60 s" in r.stderr
    r = _run("--plan", "--shared", str(tmp_path))
    assert r.returncode == 2 and f"--shared {tmp_path}: no fixtures/ folder there" in r.stderr
    r = _run("--plan", env={"WMX_SHARED": str(tmp_path)})     # the default: a note, not a stop
    assert r.returncode == 0 and f"note: no fixtures/ in {tmp_path}" in r.stdout


def test_a_prepared_offline_run_adds_the_offline_stage(tmp_path):
    run = tmp_path / "home" / "runs" / "dv3-offline-check-20260101-000000"
    r = _run("--plan", "--dreamerv3-offline-run", str(run))
    assert r.returncode == 2 and "no such run directory" in r.stderr
    run.mkdir(parents=True)
    r = _run("--plan", "--dreamerv3-offline-run", str(run))
    assert r.returncode == 2 and "no benchmark.json" in r.stderr and "--prepare-only" in r.stderr
    (run / "benchmark.json").write_text("{}")
    (run / "config.json").write_text(json.dumps({"agent": "dreamerv3", "dataset": "x@ab"}))
    r = _run("--plan", "--only", "dreamerv3_offline", "--dreamerv3-offline-run", str(run))
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.lstrip().startswith("dreamerv3_offline"))
    assert f"--resume {run}" in line and "--budget-min" in line and "(skipped)" not in line
    assert abs(_budgets(r.stdout)["total"] - device_check.DEFAULT_TOTAL_S) < 0.5
    r = _run("--plan", "--dreamerv3-offline-run", str(run))      # named, but not run by default
    line = next(ln for ln in r.stdout.splitlines() if ln.lstrip().startswith("dreamerv3_offline"))
    assert "(only with --only dreamerv3_offline)" in line
    assert "dreamerv3_offline" not in _run("--plan").stdout     # only when a run is given
    (run / "metrics.csv").write_text("seed,kind,updates,task,return\n"
                                     "0,eval,1000,reacher-easy,300.0\n")
    r = _run("--plan", "--dreamerv3-offline-run", str(run))    # the check's --resume checks
    assert r.returncode == 2 and "no checkpoints/" in r.stderr
    assert "dreamerv3_offline.py --resume RUN --report-only" in r.stderr
    (run / "metrics.csv").unlink()
    (run / "benchmark.json").write_text('{"sources": ["runs/src"]}')   # a home without it
    r = _run("--plan", "--dreamerv3-offline-run", str(run))
    assert r.returncode == 2 and "source run" in r.stderr and "not found" in r.stderr
    (run / "benchmark.json").write_text("{bad")
    r = _run("--plan", "--dreamerv3-offline-run", str(run))
    assert r.returncode == 2 and "benchmark.json is unreadable" in r.stderr


def test_the_offline_stage_takes_dreamerv3_check_runs_only(tmp_path):
    run = tmp_path / "home" / "runs" / "offline-check-20260101-000000"
    run.mkdir(parents=True)
    (run / "benchmark.json").write_text("{}")
    (run / "config.json").write_text(json.dumps({"agent": "tdmpc2", "dataset": "x@ab"}))
    r = _run("--plan", "--dreamerv3-offline-run", str(run))
    assert r.returncode == 2 and "a tdmpc2 run" in r.stderr
    assert "the stage trains DreamerV3 offline check runs" in r.stderr
    r = _run("--plan", "--only", "dreamerv3_offline")
    assert r.returncode == 2 and "needs --dreamerv3-offline-run" in r.stderr


def test_plan_with_continue_leaves_out_the_passed_stages(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "device_check.json").write_text(json.dumps({"platform": "cpu", "stages": [
        {"name": "probe", "status": "ok"}, {"name": "device_tests", "status": "ok"},
        {"name": "parity", "status": "failed"}, {"name": "tdmpc2_speed", "status": "timeout"}]}))
    r = _run("--force-cpu", "--continue", "--plan", "--out", str(out), "--total-s", "300")
    assert r.returncode == 0, r.stderr
    assert "kept from" in r.stdout and "device_tests" in r.stdout
    budgets = _budgets(r.stdout)
    assert "device_tests" not in budgets and budgets["parity"] > 0
    assert budgets["tdmpc2_speed"] > 0
