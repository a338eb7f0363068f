"""benchmarks/device_check.py: its plan fits 10 minutes, it runs nothing without a GPU or a
TPU, its stage runner kills a stuck stage (one that ignores SIGTERM too) within its limit
and grace, it reads the pytest stages' junit XML, and its CPU smoke mode runs (one stage
here; every stage in the slow test)."""
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

# run_stage forks here, in a test process that earlier tests gave JAX's threads (its
# preexec_fn makes the fork call the at-fork hooks); the device_check orchestrator that calls
# it never imports JAX, so JAX's warning about forking a threaded process is not its.
pytestmark = pytest.mark.filterwarnings(r"ignore:os\.fork\(\) was called:RuntimeWarning")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "device_check.py"
_SPEC = importlib.util.spec_from_file_location("device_check", SCRIPT)
device_check = importlib.util.module_from_spec(_SPEC)
sys.modules.setdefault("device_check", device_check)     # its dataclass looks its module up
_SPEC.loader.exec_module(device_check)

DEFAULT = ["probe", "device_tests", "parity", "tdmpc2_speed", "dreamerv3_speed_f32",
           "dreamerv3_speed_bf16"]


def _run(*args, env=None, timeout=120):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def _budgets(stdout: str) -> dict:
    """{stage: budget s} of the stages a plan runs, and "total"."""
    return {name: float(s) for name, s in re.findall(r"^  (\w+)\s+([\d.]+) s", stdout, re.M)}


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


def test_without_an_accelerator_one_line_exit_0_and_nothing_written(tmp_path):
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    r = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], capture_output=True,
                       text=True, timeout=120, env=env)
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("device_check: "), r.stdout + r.stderr
    if "sees only" not in lines[0]:
        pytest.skip(f"jax sees an accelerator here: {lines[0]}")
    if "an NVIDIA driver is present" in lines[0]:   # a driver, jax without its CUDA backend
        assert r.returncode == 1 and "requirements-lock-cuda12.txt" in lines[0]
    elif "a TPU device file is present" in lines[0]:
        assert r.returncode == 1 and "requirements-lock-tpu.txt" in lines[0]
    else:
        assert r.returncode == 0 and "no GPU or TPU found" in lines[0]
    assert lines[0].endswith("nothing run") and not out.exists()


def test_jax_platforms_cpu_is_named(tmp_path):
    r = _run("--out", str(tmp_path / "out"), env={"JAX_PLATFORMS": "cpu"})
    assert r.returncode == 0
    assert r.stdout.startswith("device_check: no accelerator used: JAX_PLATFORMS=cpu")
    assert not (tmp_path / "out").exists()


def test_a_stuck_stage_is_killed_with_its_children(tmp_path):
    marker = tmp_path / "child.pid"
    code = ("import subprocess, sys, time; "
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            f"open({str(marker)!r}, 'w').write(str(p.pid)); print('started', flush=True); "
            "time.sleep(60)")
    t = time.monotonic()
    res = device_check.run_stage([sys.executable, "-c", code], {}, tmp_path / "s.log", 3.0)
    assert res["timed_out"] and time.monotonic() - t < 20
    assert "started" in (tmp_path / "s.log").read_text()
    child = int(marker.read_text())
    time.sleep(0.2)
    assert not _alive(child)
    ok = device_check.run_stage([sys.executable, "-c", "pass"], {}, tmp_path / "t.log", 30)
    assert ok == {"returncode": 0, "timed_out": False, "wall_s": ok["wall_s"]}


def test_a_stage_that_ignores_sigterm_ends_within_its_limit_and_grace(tmp_path):
    """As `timeout -k GRACE LIMIT`: SIGTERM at the limit, SIGKILL after the grace, also for
    a child that traps SIGTERM after its parent has exited on it."""
    trap = ("import signal, time, sys; signal.signal(signal.SIGTERM, lambda *a: print("
            "'caught SIGTERM', flush=True)); print('ready', flush=True); time.sleep(60)")
    parent = (f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {trap!r}]); "
              "time.sleep(60)")
    limit, grace = 3.0, 2.0
    for code in (trap, parent):
        log = tmp_path / "trap.log"
        t = time.monotonic()
        res = device_check.run_stage([sys.executable, "-c", code], {}, log, limit, grace)
        took = time.monotonic() - t
        assert res["timed_out"] and limit + grace - 0.5 < took < limit + grace + 3, took
        assert "caught SIGTERM" in log.read_text()
        assert res["returncode"] in (-signal.SIGKILL, -signal.SIGTERM)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "caught SIGTERM" not in ps      # the trapping child is gone too


def test_run_stage_unsets_and_sets_environment_variables(tmp_path):
    code = "import os; print(os.environ.get('A_VAR'), os.environ.get('B_VAR'))"
    os.environ["A_VAR"] = "inherited"
    try:
        device_check.run_stage([sys.executable, "-c", code], {"A_VAR": None, "B_VAR": "b"},
                               tmp_path / "e.log", 30)
    finally:
        del os.environ["A_VAR"]
    assert (tmp_path / "e.log").read_text().split() == ["None", "b"]


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGKILL"])
def test_a_stage_does_not_outlive_a_killed_check(tmp_path, sig):
    pid_file = tmp_path / "stage.pid"
    stage = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    check = (f"import sys; sys.modules['device_check'] = m = __import__('importlib.util').util"
             f".module_from_spec(s := __import__('importlib.util').util.spec_from_file_location("
             f"'device_check', {str(SCRIPT)!r})); s.loader.exec_module(m); import signal; "
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


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests">
<testsuite name="pytest" errors="1" failures="1" skipped="1" tests="5" time="12.0">
<testcase classname="tests.agents.tdmpc2.test_update_parity" name="test_a[q5]" time="4.5" />
<testcase classname="tests.agents.tdmpc2.test_update_parity" name="test_b" time="0.5" />
<testcase classname="tests.agents.dreamerv3.test_train_parity" name="test_loss" time="6.0">
<failure message="AssertionError: &#10;Not equal to tolerance rtol=1e-05, atol=1e-06&#10;Mismatched elements: 3 / 512 (0.586%)&#10;Max absolute difference: 4.2e-05&#10;&#10;Max relative difference: 0.03&#10;x: 1&#10;y: 2">traceback</failure></testcase>
<testcase classname="tests.agents.dreamerv3.test_laprop_parity" name="test_x" time="1.0">
<error message="failed on setup with &quot;FileNotFoundError: fixtures&quot;">trace</error></testcase>
<testcase classname="tests.agents.dreamerv3.test_laprop_parity" name="test_y" time="0.0">
<skipped type="pytest.skip" message="no fixture" /></testcase>
</testsuite></testsuites>
"""


def test_pytest_results_from_junit_xml(tmp_path):
    xml = tmp_path / "parity.xml"
    xml.write_text(JUNIT)
    res = device_check.pytest_results(xml, tmp_path / "missing.log", slowest=2)
    assert res["source"] == "junit XML"
    assert (res["passed"], res["failed"], res["errors"], res["skipped"]) == (2, 1, 1, 1)
    fail, err = res["failures"]
    assert fail["test"] == "tests/agents/dreamerv3/test_train_parity.py::test_loss"
    assert fail["kind"] == "failed"
    assert fail["message"].splitlines() == ["AssertionError: ",
                                            "Not equal to tolerance rtol=1e-05, atol=1e-06",
                                            "Mismatched elements: 3 / 512 (0.586%)",
                                            "Max absolute difference: 4.2e-05",
                                            "Max relative difference: 0.03", "x: 1"]
    assert err["kind"] == "errors" and "FileNotFoundError" in err["message"]
    assert res["slowest"] == [["tests/agents/dreamerv3/test_train_parity.py::test_loss", 6.0],
                              ["tests/agents/tdmpc2/test_update_parity.py::test_a[q5]", 4.5]]
    assert res["time_s"] == 12.0


def test_pytest_results_fall_back_to_the_log(tmp_path):
    log = tmp_path / "t.log"
    log.write_text("tests/nn/test_rbg_bits.py::test_bits_match_jax_random[shape0] PASSED [  4%]\n"
                   "tests/nn/test_rbg_bits.py::test_bits_match_jax_random[shape1] FAILED [  8%]\n"
                   "tests/nn/test_rbg_bits.py::test_bits_match_jax_random[shape2] PASSED [ 12%]\n")
    res = device_check.pytest_results(tmp_path / "none.xml", log)   # killed: no XML
    assert res["source"].startswith("log") and res["passed"] == 2 and res["failed"] == 1
    assert res["failures"] == [{"test": "tests/nn/test_rbg_bits.py::test_bits_match_jax_random"
                                        "[shape1]", "kind": "failed", "message": None}]
    (tmp_path / "bad.xml").write_text("<testsuites><testsuite>")   # cut short
    assert device_check.pytest_results(tmp_path / "bad.xml", log)["source"].startswith("log")


def test_speed_results_name_seeds_and_device_memory(tmp_path):
    dv = tmp_path / "dv.json"
    dv.write_text(json.dumps({"matmul_baseline": {"gflop_per_s": 1e5}, "items": {
        "train_12m": {"wmx": {"median_ms": 20.0, "cpu_median_ms": 5.0, "seeds": 1,
                              "gflop": 40.0, "compile_s": 50.0,
                              "device_memory": {"peak_bytes_in_use": 3 << 30}}},
        "train_12m_seeds5": {"wmx": {"median_ms": 50.0, "cpu_median_ms": 5.0, "seeds": 5,
                                     "gflop": 200.0, "device_memory": None}}}}))
    res = device_check.dreamerv3_speed_results(dv, "bfloat16")
    assert res["compute_dtype"] == "bfloat16"
    assert res["train_12m"]["device_peak_bytes_in_use"] == 3 << 30
    assert res["train_12m"]["tflop_per_s"] == 2.0
    assert res["train_12m_seeds5"]["per_seed_ms"] == 10.0
    assert res["train_12m_seeds5"]["device_peak_bytes_in_use"] is None
    td = tmp_path / "td.json"
    td.write_text(json.dumps({"ceiling_before": {"xla_gflop_per_s": 9.0}, "plan": [
        {"model_size": 5, "seeds": 1, "wmx_median_ms": 3.2, "wmx_cpu_median_ms": 1.0,
         "gflop": 6.4, "device_memory": {"peak_bytes_in_use": 123}},
        {"model_size": 5, "seeds": 2, "wmx_median_ms": 4.0, "wmx_cpu_median_ms": 1.0,
         "gflop": 12.8, "device_memory": None}]}))
    res = device_check.tdmpc2_speed_results(td)
    assert res["plan_size5"]["device_peak_bytes_in_use"] == 123
    assert res["plan_size5_seeds2"]["per_seed_ms"] == 2.0
    assert device_check.tdmpc2_speed_results(tmp_path / "none.json") is None


def test_learning_results_fall_back_to_metrics_csv(tmp_path):
    run = tmp_path / "home" / "runs" / "learning-dreamerv3-cartpole-balance-20260101-000000"
    run.mkdir(parents=True)
    (run / "config.json").write_text("{}")
    (run / "metrics.csv").write_text(
        "seed,kind,agent_steps,env_steps,return\n0,train,8000,16000,120.5\n"
        "1,train,8000,16000,99.5\n0,eval,8000,16000,\n")
    res = device_check.learning_results(tmp_path / "raw", tmp_path / "home", "dreamerv3",
                                        "cartpole-balance")
    assert res["train_curve"] == {"16000": [120.5, 99.5]} and res["eval_curve"] == {}
    assert res["env_steps_reached"] == 16000 and "metrics.csv" in res["source"]
    assert (tmp_path / "raw" / "learning" / "dreamerv3_run" / "metrics.csv").exists()
    rec = {"stages": [{"name": "dreamerv3_learning", "status": "timeout", "wall_s": 60,
                       "results": res}]}
    assert device_check.learning_of(rec) == {"dreamerv3": res}
    assert device_check.plot(rec, tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 1000
    assert not device_check.plot({"stages": [{"name": "probe"}]}, tmp_path / "q.png")
    assert not (tmp_path / "q.png").exists()


SPEED_RECORD = {"device_kind": "TPU v5 lite", "platform": "tpu", "jax": "0.10.2", "stages": [
    {"name": "probe", "status": "ok", "wall_s": 12},
    {"name": "dreamerv3_speed_bf16", "status": "ok", "wall_s": 116, "results": {
        "compute_dtype": "bfloat16", "xla_matmul_gflop_per_s": 3716.0,
        "train_12m": {"seeds": 1, "per_seed_ms": 13.1, "median_ms": 13.1},
        "train_12m_seeds5": {"seeds": 5, "per_seed_ms": 10.9, "median_ms": 54.7},
        "memory": {}}},
    {"name": "tdmpc2_speed", "status": "ok", "wall_s": 86, "results": {
        "update_size5": {"seeds": 1, "per_seed_ms": 4.8, "median_ms": 4.8}}},
    {"name": "dreamerv3_speed_f32", "status": "timeout", "wall_s": 99, "results": {
        "train_12m": {"seeds": 1, "per_seed_ms": 99.0}}}]}


def test_speed_series_by_program_and_dtype_from_ok_stages_only():
    series = device_check.speed_series(SPEED_RECORD)
    assert series == {"DreamerV3 12m training step (bfloat16)": {1: 13.1, 5: 10.9},
                      "TD-MPC2 size-5 update": {1: 4.8}}


def test_replot_draws_a_record_again_and_refuses_what_is_not_one(tmp_path):
    src = tmp_path / "device_check_tpu.json"
    src.write_text(json.dumps(SPEED_RECORD))
    r = _run("--replot", str(src))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "device_check_tpu.png").stat().st_size > 1000
    bad = tmp_path / "other.json"
    bad.write_text("[1, 2]")
    r = _run("--replot", str(bad))
    assert r.returncode == 2 and "not a readable device_check record" in r.stderr
    assert not (tmp_path / "other.png").exists()


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


def test_offline_results_from_the_json_or_the_runs_metrics(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.csv").write_text(
        "seed,kind,updates,task,return\n0,train,500,,\n0,eval,1000,reacher-easy,300.0\n"
        "0,eval,1000,mean,\n0,train,1500,,\n")
    res = device_check.offline_results(tmp_path / "raw", run)
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
    res = device_check.offline_results(tmp_path / "raw", run)
    assert res["source"] == "offline check JSON" and res["passed"] is False
    assert res["eval_curve"]["reacher-easy"]["2000"] == 350.0
    assert res["final_return"] == {"reacher-easy": 310.0}
    assert (tmp_path / "raw" / "offline" / "run_report.json").read_text() == "{}"
    assert (tmp_path / "raw" / "offline" / "run_summary.json").is_file()


def test_force_cpu_parity_stage_without_fixtures_fails_with_one_line(tmp_path):
    """The probe runs (on the CPU), the parity stage is refused with its reason, the JSON
    names the platform and device kind; run as a copy without git (GIT_DIR names no
    repository, as on a device machine), the JSON's commit is WMX_CODE_VERSION's."""
    out = tmp_path / "out"
    code = "c0ffee" * 6 + "abcd"
    r = _run("--force-cpu", "--only", "parity", "--out", str(out), "--total-s", "120",
             env={"WMX_SHARED": str(tmp_path), "GIT_DIR": str(tmp_path / "no-git"),
                  "WMX_CODE_VERSION": code})
    assert r.returncode == 0, r.stdout + r.stderr
    rec = json.loads((out / "device_check.json").read_text())
    assert rec["platform"] == "cpu" and rec["device_kind"] and rec["device_count"] >= 1
    assert rec["git_commit"] == code
    st = {s["name"]: s for s in rec["stages"]}
    assert st["parity"]["status"] == "failed"
    assert st["parity"]["reason"].startswith(f"no fixtures/ in {tmp_path}: pass --shared DIR")
    assert st["device_tests"]["status"] == "skipped"
    assert f"parity: failed: no fixtures/ in {tmp_path}" in r.stdout


def test_force_cpu_smoke_runs_the_parity_stage(tmp_path):
    """--force-cpu --only parity: one parity module on the CPU, read back from its junit XML."""
    shared = Path(os.environ.get("WMX_SHARED") or SCRIPT.parents[2] / "shared")
    if not (shared / "fixtures").is_dir():
        pytest.skip(f"no fixtures/ in {shared}")
    out = tmp_path / "out"
    r = _run("--force-cpu", "--only", "parity", "--out", str(out), "--shared", str(shared),
             "--total-s", "240", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    rec = json.loads((out / "device_check.json").read_text())
    st = {s["name"]: s for s in rec["stages"]}["parity"]
    assert st["status"] == "ok", st
    res = st["results"]
    assert res["source"] == "junit XML" and res["passed"] >= 4 and res["failed"] == 0
    assert res["failures"] == [] and (out / "device_check" / "parity.xml").is_file()


@pytest.mark.slow
def test_force_cpu_smoke_runs_every_stage(tmp_path):
    """--force-cpu: tiny sizes on the CPU, every stage ok, the JSON and the plot written
    (~15 min on 2 cores)."""
    out = tmp_path / "out"
    names = [s.name for s in device_check.stages(Path("raw"), Path("home"), True)][1:]
    r = _run("--force-cpu", "--out", str(out), "--total-s", "1800", "--only", *names,
             timeout=1900)
    assert r.returncode == 0, r.stdout + r.stderr
    rec = json.loads((out / "device_check.json").read_text())
    assert rec["mode"].startswith("force-cpu") and rec["jax"] and rec["platform"] == "cpu"
    status = {s["name"]: s["status"] for s in rec["stages"]}
    assert set(status.values()) == {"ok"}, rec["stages"]
    st = {s["name"]: s for s in rec["stages"]}
    assert st["device_tests"]["results"]["passed"] > 10
    assert st["tdmpc2_speed"]["results"]["update_size1"]["median_ms"] > 0
    for name in ("dreamerv3_speed_f32", "dreamerv3_speed_bf16"):
        res = st[name]["results"]
        assert res["train_1m"]["median_ms"] > 0 and res["train_1m_seeds2"]["seeds"] == 2
    for name in ("tdmpc2_learning", "dreamerv3_learning"):
        assert st[name]["results"]["env_steps_reached"] > 0 and st[name]["results"]["eval_curve"]
    assert (out / "device_check.png").stat().st_size > 1000


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


def test_passed_stages_keeps_only_ok_and_names_their_call():
    rec = {"started": "T0", "stages": [
        {"name": "probe", "status": "ok"}, {"name": "device_tests", "status": "ok"},
        {"name": "parity", "status": "timeout"}, {"name": "tdmpc2_speed", "status": "failed"},
        {"name": "dreamerv3_speed_f32", "status": "not run"},
        {"name": "dreamerv3_speed_bf16", "status": "interrupted"},
        {"name": "tdmpc2_learning", "status": "skipped"},
        {"name": "dreamerv3_learning", "status": "error"}]}
    kept = device_check.passed_stages(rec)
    assert sorted(kept) == ["device_tests"]      # failed, timeout, error, ...: run again
    assert kept["device_tests"] == {"name": "device_tests", "status": "ok", "call": "T0"}
    rec["stages"][1]["call"] = "T-1"         # kept from a call before that one
    assert device_check.passed_stages(rec)["device_tests"]["call"] == "T-1"


def test_continue_keeps_the_passed_stages_reruns_failed_and_refuses_another_device(tmp_path):
    """--continue: no JSON -> one line, exit 2; a JSON of another device kind -> exit 2,
    nothing changed; a stage that failed runs again, one that passed (ok) does not."""
    out = tmp_path / "out"
    r = _run("--force-cpu", "--continue", "--out", str(out), "--total-s", "120")
    assert r.returncode == 2 and "--continue: no device_check.json in" in r.stderr
    assert not out.exists()
    env = {"WMX_SHARED": str(tmp_path)}         # no fixtures/ there: parity fails at once
    r = _run("--force-cpu", "--only", "parity", "--out", str(out), "--total-s", "120", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    first = json.loads((out / "device_check.json").read_text())
    assert {e["name"]: e["status"] for e in first["stages"]}["parity"] == "failed"
    r = _run("--force-cpu", "--continue", "--only", "parity", "--out", str(out),
             "--total-s", "120", env=env)
    assert r.returncode == 0 and "parity: failed: no fixtures/" in r.stdout, r.stdout
    again = json.loads((out / "device_check.json").read_text())
    parity = next(e for e in again["stages"] if e["name"] == "parity")
    assert parity["status"] == "failed" and "call" not in parity     # this call's, not kept
    assert [c["started"] for c in again["calls"]][:1] == [first["started"]]
    assert len(again["calls"]) == 2
    parity["status"] = "ok"                     # as a passed stage: kept, not run again
    (out / "device_check.json").write_text(json.dumps(again))
    first = (out / "device_check.json").read_text()
    r = _run("--force-cpu", "--continue", "--only", "parity", "--out", str(out),
             "--total-s", "120", env=env)
    assert r.returncode == 0 and "every selected stage is already ok" in r.stdout
    assert (out / "device_check.json").read_text() == first
    other = json.loads(first)
    other["device_kind"] = "TPU v5 lite"
    (out / "device_check.json").write_text(json.dumps(other))
    r = _run("--force-cpu", "--continue", "--out", str(out), "--total-s", "120", env=env)
    assert r.returncode == 2 and "is of a TPU v5 lite" in r.stdout, r.stdout + r.stderr
    assert json.loads((out / "device_check.json").read_text()) == other


def test_portable_renames_the_machines_folders_longest_first():
    places = {"/m/repo/out": "<out>", "/m/repo/": "", "/m/repo/.venv/bin/python": "python",
              "/t/home_x": "<home>"}
    rec = {"command": ["/m/repo/.venv/bin/python", "/m/repo/benchmarks/x.py", "--out",
                       "/m/repo/out/device_check/x.json", "--home", "/t/home_x"],
           "n": 3, "nested": [{"log": "/m/repo/out/logs/a.log"}]}
    assert device_check.portable(rec, places) == {
        "command": ["python", "benchmarks/x.py", "--out", "<out>/device_check/x.json",
                    "--home", "<home>"], "n": 3, "nested": [{"log": "<out>/logs/a.log"}]}


@pytest.mark.parametrize("text", ["", "hello{", "[]", '{"stages": "x"}',
                                  '{"stages": [{"status": "ok"}]}',
                                  '{"stages": [{"name": ["x"], "status": "ok"}]}'])
def test_continue_refuses_a_damaged_record_in_one_line(tmp_path, text):
    out = tmp_path / "out"
    out.mkdir()
    (out / "device_check.json").write_text(text)
    for extra in ([], ["--plan"]):
        r = _run("--force-cpu", "--continue", *extra, "--out", str(out), "--total-s", "120")
        assert r.returncode == 2 and "is not a device_check record" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    assert (out / "device_check.json").read_text() == text and len(list(out.iterdir())) == 1


def test_an_out_folder_that_cannot_be_made_is_refused_before_the_probe(tmp_path):
    (tmp_path / "afile").write_text("")
    r = _run("--force-cpu", "--only", "parity", "--out", str(tmp_path / "afile" / "sub"),
             "--total-s", "120")
    assert r.returncode == 2 and "is not a folder" in r.stderr and "Traceback" not in r.stderr


def test_with_kept_holds_the_stages_not_reached_yet():
    kept = {"dreamerv3_speed_f32": {"name": "dreamerv3_speed_f32", "status": "ok"}}
    rec = {"stages": [{"name": "probe", "status": "ok"}, {"name": "device_tests"}]}
    assert [e["name"] for e in device_check.with_kept(rec, kept)["stages"]] == [
        "probe", "device_tests", "dreamerv3_speed_f32"]
    rec["stages"].append(kept["dreamerv3_speed_f32"])
    assert device_check.with_kept(rec, kept) is rec


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
