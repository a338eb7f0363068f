"""benchmarks/device_check.py's record: its CPU smoke mode writes it (one stage here; every
stage in the slow test), ``--continue`` keeps the stages an earlier call passed and refuses
a damaged record or another device, and the record names no machine's folders."""
import json
import os
from pathlib import Path

import pytest

from device_check_common import SCRIPT, _run, device_check


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
