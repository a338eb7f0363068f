"""The outer process of `official_dreamerv3.py`'s training mode: the child that trains, and
its whole output recorded (`tee_process`, `ended_line`, `supervise`).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from _official_envs import exit_text
from _official_logs import run_record
from _official_outputs import finish
from _official_settings import (DRIVER, RUN_LOG, SUMMARY, WORKER_ENV, check_official,
                                resolve_settings)
from _official_train import _report_error

def tee_process(cmd: list[str], env: dict, logs: list[Path], echo=None,
                drain_s: float = 10.0, what: str = "the training process") -> int:
    """Run ``cmd`` with its stdout and stderr together copied, as they come, to ``echo`` and
    appended to every file of ``logs``; SIGTERM and SIGINT sent to this process are passed
    on to it. A header (time, command, the environment that matters) and a footer (how it
    ended, `ended_line`) are written to the logs.

    Args:
      cmd: the command (its first item the program).
      env: its environment.
      logs: files to append to (their folders must exist).
      echo: a binary stream for the copy (default this process's stdout); write errors on
        it are ignored.
      drain_s: after the process ended, how long to keep reading what the processes it left
        (which hold the pipe) still write.
      what: the process, in the footer's words (the mode's: "the training process", "the
        check-finite process").
    Returns:
      Its exit status (negative: the signal that ended it).
    """
    echo = echo if echo is not None else sys.stdout.buffer
    files = [open(path, "ab", buffering=0) for path in logs]

    def write(data: bytes, to_echo: bool = True) -> None:
        if to_echo:
            try:
                echo.write(data)
                echo.flush()
            except (OSError, ValueError):
                pass
        for f in files:
            try:
                f.write(data)
            except (OSError, ValueError):   # ValueError: closed (a reader left behind)
                pass

    keep = ("JAX_PLATFORMS", "MUJOCO_GL", "PYTHONPATH", "XLA_FLAGS", "TPU_VISIBLE_CHIPS")
    write(("==== " + time.strftime("%Y-%m-%d %H:%M:%S %Z") + ": " + " ".join(cmd) + "\n"
           + "".join(f"==== {k}={env[k]}\n" for k in keep if k in env)).encode(), False)
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)

    def forward(signum, frame):
        if proc.poll() is None:
            proc.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}

    def pump() -> None:
        fd = proc.stdout.fileno()
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:
                return
            if not chunk:
                return
            write(chunk)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        status = proc.wait()
        reader.join(drain_s)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    write(ended_line(what, status).encode(), status != 0)
    for f in files:
        f.close()
    return status


def ended_line(what: str, status: int | None) -> str:
    """`tee_process`'s footer: the time and how process ``what`` ended (`exit_text`)."""
    return f"==== {time.strftime('%Y-%m-%d %H:%M:%S %Z')}: {what} {exit_text(status)}\n"


def supervise(args, argv: list[str]) -> int:
    """The training mode's outer process: check the flags, then train in a child process
    (this script again, with `WORKER_ENV` set) whose whole output goes to the terminal and
    to `RUN_LOG` in the logdir and in --out (`tee_process`), so that a failure's message
    is kept even when the child dies in a runtime's fatal error or is killed. When the child
    ended without writing its summary (killed, crashed), the logs it left are converted
    here (metrics.csv, summary and the logs' tar into --out).

    Args:
      args: the parsed flags.
      argv: the command line's arguments, passed on unchanged.
    Returns:
      The child's exit status, as a shell reports it (128 + N for signal N).
    """
    logdir = Path(args.logdir).expanduser().resolve()
    resolve_settings(args, logdir)     # a wrong flag fails here, in one line
    check_official(args.official)
    logdir.mkdir(parents=True, exist_ok=True)
    logs = [logdir / RUN_LOG]
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        logs.append(Path(args.out) / RUN_LOG)
    env = {**os.environ, WORKER_ENV: "1", "PYTHONUNBUFFERED": "1"}
    started = time.time()
    status = tee_process([sys.executable, "-u", str(DRIVER), *argv], env,
                         logs)
    summary = logdir / SUMMARY
    wrote = summary.is_file() and summary.stat().st_mtime >= started - 1   # coarse clocks
    record = run_record(logdir)
    if status != 0 and not wrote and record is not None:
        print("[official_dreamerv3] converting the logs the training process left",
              flush=True)
        try:
            finish(logdir, record, None, args.out)
        except Exception as e:   # noqa: BLE001 - the run's own failure matters more
            _report_error("converting the logs", e)
    return 128 - status if status < 0 else status


