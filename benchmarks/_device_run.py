"""Running one device_check stage: its own session and process group, output to a log,
``timeout -k`` semantics at its limit, and no stage outliving the check.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
KILL_GRACE_S = 10.0
"""Seconds between a late stage's SIGTERM and its SIGKILL (``timeout -k`` grace)."""


def run_stage(argv: list[str], env: dict, log: Path, timeout_s: float,
              grace_s: float = KILL_GRACE_S) -> dict:
    """Run argv in its own session with output to ``log``, as ``timeout -k grace_s
    timeout_s`` would: at ``timeout_s`` SIGTERM to its process group, SIGKILL ``grace_s``
    later if it is still there.

    Args:
      argv: the command.
      env: changes to this process's environment (a None value unsets the variable).
      log: the file of its stdout and stderr.
      timeout_s: its limit, s.
      grace_s: seconds between SIGTERM and SIGKILL.

    Returns:
      {"returncode", "timed_out", "wall_s"}.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    # this checkout's wmx, whatever an installed wmx points at
    path = os.pathsep.join(x for x in (str(ROOT), os.environ.get("PYTHONPATH")) if x)
    full = {**os.environ, "PYTHONPATH": path}
    for k, v in env.items():
        if v is None:
            full.pop(k, None)
        else:
            full[k] = v
    t0 = time.monotonic()
    with open(log, "w") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, env=full,
                                start_new_session=True, preexec_fn=_die_with_parent)
        timed_out = False
        try:
            proc.wait(timeout=max(timeout_s, 1.0))
            if group_alive(proc.pid):     # what it left running (the next stage may need
                kill_group(proc, grace_s)  # the device to itself)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(proc, grace_s)
        except BaseException:
            kill_group(proc, grace_s)
            raise
    return {"returncode": proc.returncode, "timed_out": timed_out,
            "wall_s": round(time.monotonic() - t0, 2)}


def _die_with_parent() -> None:
    """In the stage's process: SIGKILL it when the check's process dies (Linux
    prctl PR_SET_PDEATHSIG), so a killed check leaves no stage running."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _exit_on_signal(signum, frame) -> None:
    """SIGTERM/SIGHUP: unwind (the running stage is killed, the JSON written)."""
    raise SystemExit(128 + signum)


def kill_group(proc: subprocess.Popen, grace_s: float = KILL_GRACE_S) -> None:
    """SIGTERM the stage's process group, SIGKILL whatever of it is left ``grace_s`` later
    (also children that outlive a leader that exited on SIGTERM), and reap the leader."""
    _signal_group(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if proc.poll() is not None and not group_alive(proc.pid):
            break
        time.sleep(0.05)
    _signal_group(proc.pid, signal.SIGKILL)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def group_alive(pgid: int) -> bool:
    """Whether any process of the group ``pgid`` is still there."""
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def log_tail(log: Path, n: int = 8) -> list[str]:
    """The last ``n`` non-empty lines of a stage's log (each cut to 300 characters)."""
    try:
        lines = log.read_text(errors="replace").replace("\r", "\n").splitlines()
    except OSError:
        return []
    return [ln[-300:] for ln in lines if ln.strip()][-n:]
