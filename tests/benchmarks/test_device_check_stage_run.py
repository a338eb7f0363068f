"""benchmarks/device_check.py runs nothing without a GPU or a TPU, and its stage runner kills
a stuck stage (one that ignores SIGTERM too) within its limit and grace, with its children,
and when the check itself is killed."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from device_check_common import SCRIPT, _run, device_check

# run_stage forks here, in a test process that earlier tests gave JAX's threads (its
# preexec_fn makes the fork call the at-fork hooks); the device_check orchestrator that calls
# it never imports JAX, so JAX's warning about forking a threaded process is not its.
pytestmark = pytest.mark.filterwarnings(r"ignore:os\.fork\(\) was called:RuntimeWarning")


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
