"""benchmarks/device_check.py reads its stages' results: the pytest stages' junit XML (or
their log), the speed stages' JSON, the learning and offline runs' JSON or metrics.csv; and
draws its plot (again, with ``--replot``)."""
import json

from device_check_common import _run, device_check


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
