"""benchmarks/gpu_check.py: its plan fits 10 minutes, it runs nothing without a GPU,
its stage runner kills a stuck stage, and (slow) its CPU smoke mode runs end to end."""
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.py"
_SPEC = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
gpu_check = importlib.util.module_from_spec(_SPEC)
sys.modules.setdefault("gpu_check", gpu_check)     # its dataclass looks its module up
_SPEC.loader.exec_module(gpu_check)


def _run(*args, env=None, timeout=120):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("force_cpu", [False, True])
def test_plan_budgets_sum_to_at_most_600_s(force_cpu):
    r = _run("--plan", *(["--force-cpu"] if force_cpu else []))
    assert r.returncode == 0, r.stderr
    rows = re.findall(r"^  (\w+)\s+([\d.]+) s", r.stdout, re.M)
    budgets = {name: float(s) for name, s in rows}
    total = budgets.pop("total")
    assert list(budgets) == ["probe", "device_tests", "tdmpc2_speed", "dreamerv3_speed",
                             "tdmpc2_learning", "dreamerv3_learning"]
    assert abs(sum(budgets.values()) + gpu_check.FINISH_RESERVE_S - total) < 0.5
    assert total <= 600
    assert "--budget-min" in r.stdout
    assert ("--preset tiny" if force_cpu else "--preset paper") in r.stdout


def test_paper_sizes_in_the_gpu_plan(tmp_path):
    plan = {s.name: s for s in gpu_check.stages(tmp_path / "raw", tmp_path / "home", False)}
    td, dv = plan["tdmpc2_speed"].argv, plan["dreamerv3_speed"].argv
    assert td[td.index("--sizes") + 1:td.index("--sizes") + 2] == ["5"]
    assert dv[dv.index("--sizes") + 1:dv.index("--sizes") + 2] == ["12m"]
    for name in ("tdmpc2_learning", "dreamerv3_learning"):
        a = plan[name].argv
        assert a[a.index("--preset") + 1] == "paper" and a[a.index("--task") + 1] == gpu_check.TASK
    r = _run("--plan", "--only", "dreamerv3_learning", "--dreamerv3-task", "reacher-easy")
    dv = next(ln for ln in r.stdout.splitlines() if ln.lstrip().startswith("dreamerv3_learning"))
    td = next(ln for ln in r.stdout.splitlines() if ln.lstrip().startswith("tdmpc2_learning"))
    assert "--task reacher-easy" in dv and "--preset paper" in dv and "(skipped)" not in dv
    assert "--seeds 0 1 " in dv and "--chunk-ticks" in dv   # the criterion's 2 seeds
    assert f"--task {gpu_check.TASK}" in td and "(skipped)" in td
    # the one stage that runs gets the skipped stages' budgets: all but the probe's
    probe = float(re.search(r"^  probe\s+([\d.]+) s", r.stdout, re.M)[1])
    limit = float(re.search(r"\(limit ~(\d+) s with the skipped stages' budgets", dv)[1])
    assert abs(limit - (gpu_check.DEFAULT_TOTAL_S - gpu_check.FINISH_RESERVE_S - probe)) <= 1
    assert "limit ~" not in td
    names = [s.name for s in gpu_check.stages(Path("raw"), Path("home"), False)]
    every = _run("--plan", "--only", *names[1:]).stdout         # nothing skipped: no note
    assert "skipped" not in every and "~" not in every


def test_total_s_scales_the_budgets_and_only_checks_names():
    r = _run("--plan", "--total-s", "300")
    total = float(re.search(r"^  total\s+([\d.]+) s", r.stdout, re.M)[1])
    assert abs(total - 300) < 0.5
    r = _run("--plan", "--only", "tdmpc2_speed", "nope")
    assert r.returncode == 2 and "unknown stage(s) ['nope']" in r.stderr


def test_without_a_gpu_one_line_exit_0_and_nothing_written(tmp_path):
    out = tmp_path / "out"
    r = _run("--out", str(out))
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_check: "), r.stdout + r.stderr
    if "sees only" not in lines[0]:
        pytest.skip(f"jax sees a GPU here: {lines[0]}")
    if "an NVIDIA driver is present" in lines[0]:   # a driver, jax without its CUDA backend
        assert r.returncode == 1 and "requirements-lock-cuda12.txt" in lines[0]
    else:                    # no GPU at all, or JAX_PLATFORMS=cpu (as `make test` sets)
        assert r.returncode == 0 and ("no GPU found" in lines[0] or "no GPU used" in lines[0])
    assert lines[0].endswith("nothing run") and not out.exists()


def test_jax_platforms_cpu_is_named(tmp_path):
    r = _run("--out", str(tmp_path / "out"), env={"JAX_PLATFORMS": "cpu"})
    assert r.returncode == 0 and r.stdout.startswith("gpu_check: no GPU used: JAX_PLATFORMS=cpu")
    assert not (tmp_path / "out").exists()


# run_stage forks here, in a test process that earlier tests gave JAX's threads (its
# preexec_fn makes the fork call the at-fork hooks); the gpu_check orchestrator that calls
# it never imports JAX, so JAX's warning about forking a threaded process is not its.
@pytest.mark.filterwarnings(r"ignore:os\.fork\(\) was called:RuntimeWarning")
def test_a_stuck_stage_is_killed_with_its_children(tmp_path):
    marker = tmp_path / "child.pid"
    code = ("import subprocess, sys, time; "
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            f"open({str(marker)!r}, 'w').write(str(p.pid)); print('started', flush=True); "
            "time.sleep(60)")
    t = time.monotonic()
    res = gpu_check.run_stage([sys.executable, "-c", code], {}, tmp_path / "s.log", 3.0)
    assert res["timed_out"] and time.monotonic() - t < 20
    assert "started" in (tmp_path / "s.log").read_text()
    child = int(marker.read_text())
    time.sleep(0.2)
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text(
    ).split()[2]
    ok = gpu_check.run_stage([sys.executable, "-c", "pass"], {}, tmp_path / "t.log", 30)
    assert ok == {"returncode": 0, "timed_out": False, "wall_s": ok["wall_s"]}


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGKILL"])
def test_a_stage_does_not_outlive_a_killed_check(tmp_path, sig):
    pid_file = tmp_path / "stage.pid"
    stage = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    check = (f"import sys; sys.modules['gpu_check'] = m = __import__('importlib.util').util"
             f".module_from_spec(s := __import__('importlib.util').util.spec_from_file_location("
             f"'gpu_check', {str(SCRIPT)!r})); s.loader.exec_module(m); import signal; "
             f"signal.signal(signal.SIGTERM, m._exit_on_signal); "
             f"m.run_stage([sys.executable, '-c', {stage!r}], {{}}, "
             f"m.Path({str(tmp_path / 's.log')!r}), 60)")
    proc = subprocess.Popen([sys.executable, "-c", check])
    for _ in range(200):
        if pid_file.exists() and pid_file.read_text():
            break
        time.sleep(0.1)
    stage_pid = int(pid_file.read_text())
    proc.send_signal(getattr(signal, sig))
    proc.wait(timeout=30)
    for _ in range(100):
        if not _alive(stage_pid):
            break
        time.sleep(0.1)
    assert not _alive(stage_pid), f"the stage outlived the check ({sig})"


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_learning_results_fall_back_to_metrics_csv(tmp_path):
    run = tmp_path / "home" / "runs" / "learning-dreamerv3-cartpole-balance-20260101-000000"
    run.mkdir(parents=True)
    (run / "config.json").write_text("{}")
    (run / "metrics.csv").write_text(
        "seed,kind,agent_steps,env_steps,return\n0,train,8000,16000,120.5\n"
        "1,train,8000,16000,99.5\n0,eval,8000,16000,\n")
    res = gpu_check.learning_results(tmp_path / "raw", tmp_path / "home", "dreamerv3",
                                     "cartpole-balance")
    assert res["train_curve"] == {"16000": [120.5, 99.5]} and res["eval_curve"] == {}
    assert res["env_steps_reached"] == 16000 and "metrics.csv" in res["source"]
    assert (tmp_path / "raw" / "learning" / "dreamerv3_run" / "metrics.csv").exists()
    assert gpu_check.plot({"dreamerv3": res}, tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 1000
    assert not gpu_check.plot({"tdmpc2": None}, tmp_path / "q.png")


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
    total = float(re.search(r"^  total\s+([\d.]+) s", r.stdout, re.M)[1])
    assert abs(total - gpu_check.DEFAULT_TOTAL_S) < 0.5        # seven stages, same total
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


def test_offline_results_from_the_json_or_the_runs_metrics(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.csv").write_text(
        "seed,kind,updates,task,return\n0,train,500,,\n0,eval,1000,reacher-easy,300.0\n"
        "0,eval,1000,mean,\n0,train,1500,,\n")
    res = gpu_check.offline_results(tmp_path / "raw", run)
    assert res["eval_curve"] == {"reacher-easy": {"1000": 300.0}}
    assert res["updates_reached"] == 1500 and "metrics.csv" in res["source"]
    assert (tmp_path / "raw" / "offline" / "run_metrics.csv").exists()
    (tmp_path / "raw" / "offline" / "dreamerv3_offline.json").write_text(json.dumps(
        {"updates_reached": 2000, "passed": False, "tasks": {"reacher-easy": {
            "offline_eval_return": {"1000": 300.0, "2000": 350.0},
            "offline_final_return": 310.0, "source_final_return": 861.2}}}))
    (run / "report").mkdir()                    # the check's final evaluation comes back too
    (run / "report" / "report.json").write_text("{}")
    (run / "summary.json").write_text('{"finished": true}')
    res = gpu_check.offline_results(tmp_path / "raw", run)
    assert res["source"] == "offline check JSON" and res["passed"] is False
    assert res["eval_curve"]["reacher-easy"]["2000"] == 350.0
    assert res["final_return"] == {"reacher-easy": 310.0}
    assert (tmp_path / "raw" / "offline" / "run_report.json").read_text() == "{}"
    assert (tmp_path / "raw" / "offline" / "run_summary.json").is_file()


@pytest.mark.slow
def test_force_cpu_smoke_runs_every_stage(tmp_path):
    """--force-cpu: tiny sizes on the CPU, every stage ok, the JSON and the plot written
    (~10 min on 2 cores)."""
    out = tmp_path / "out"
    r = _run("--force-cpu", "--out", str(out), "--total-s", "1500", timeout=1600)
    assert r.returncode == 0, r.stdout + r.stderr
    rec = json.loads((out / "gpu_check.json").read_text())
    assert rec["mode"].startswith("force-cpu") and rec["jax"]
    status = {s["name"]: s["status"] for s in rec["stages"]}
    assert set(status.values()) == {"ok"}, rec["stages"]
    st = {s["name"]: s for s in rec["stages"]}
    assert st["tdmpc2_speed"]["results"]["update_size1"]["median_ms"] > 0
    assert st["dreamerv3_speed"]["results"]["train_1m"]["median_ms"] > 0
    for name in ("tdmpc2_learning", "dreamerv3_learning"):
        assert st[name]["results"]["env_steps_reached"] > 0 and st[name]["results"]["eval_curve"]
    assert (out / "gpu_check.png").stat().st_size > 1000


def test_pytest_summary_reads_the_counts(tmp_path):
    log = tmp_path / "t.log"
    log.write_text("....F.\nFAILED tests/nn/test_rbg_bits.py::test_x\n"
                   "1 failed, 15 passed, 2 skipped in 12.3s\n")
    assert gpu_check.pytest_summary(log) == {"failed": 1, "passed": 15, "skipped": 2}
    log.write_text("killed\n")
    assert gpu_check.pytest_summary(log) == {}


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
