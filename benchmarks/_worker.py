"""A timing worker: a process that holds compiled programs and times them on request.

`dreamerv3_speed.py` runs wmx and the official DreamerV3 in separate
processes (the official code needs its own, older JAX), keeps each process
alive across rounds so nothing is recompiled, and alternates timed blocks
between them. The protocol is one JSON object per line:

    request  {"cmd": "setup" | "time" | "stats" | ..., "args": {...}}
    reply    {"ok": true, "result": ...} | {"ok": false, "error": "...", "traceback": "..."}

and a request {"cmd": "quit"} ends the worker. Replies go to the worker's
original stdout; everything else the worker prints (the reference code
prints while it traces) is sent to stderr, which the orchestrator writes to a
log file.

Also here: `synthetic_windows`, the one synthetic window batch both workers
train on (numpy, the reference's replay layout), so wmx and the official code
time the same inputs. A worker times its items with `_machine.time_calls`
(imported once JAX is set up).

Needs only numpy and the standard library on the worker side.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any, Callable

import numpy as np


# ---- worker side --------------------------------------------------------------------
_REPLY = None


def protect_stdout():
    """Keep the original stdout for replies and send everything else written to
    it (Python prints and C-level writes to fd 1) to stderr. Call it before
    importing the code under test: the reference prints at import time
    ("For colored outputs: ..."). Returns the reply stream; idempotent."""
    global _REPLY
    if _REPLY is None:
        sys.stdout.flush()
        _REPLY = os.fdopen(os.dup(1), "w", buffering=1)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
    return _REPLY


def serve(handlers: dict[str, Callable[..., Any]]) -> None:
    """Answer requests from stdin until "quit" or end of input (see the module docstring)."""
    reply = protect_stdout()
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        if req["cmd"] == "quit":
            reply.write(json.dumps({"ok": True, "result": None}) + "\n")
            return
        try:
            result = handlers[req["cmd"]](**req.get("args", {}))
            reply.write(json.dumps({"ok": True, "result": result}) + "\n")
        except Exception as e:  # noqa: BLE001 - reported to the orchestrator
            reply.write(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}",
                                    "traceback": traceback.format_exc()}) + "\n")


def synthetic_windows(batch_size: int, length: int, obs_dim: int, action_dim: int,
                      deter: int, stoch: int, classes: int, seed: int = 0) -> dict:
    """One replay batch of B windows of ``length`` rows, in the reference's layout.

    Returns numpy arrays: vector f32[B, L, O] ~ N(0, 1); action f32[B, L, A]
    ~ U(−1, 1); reward f32[B, L] ~ N(0, 1); is_first, is_last, is_terminal
    bool[B, L] (episode boundaries with probability 1/500 per row, the
    DMC episode length; no terminals); deter f32[B, L, D] ~ U(−1, 1) (a GRU
    state is in (−1, 1)); stoch i32[B, L, S] class ids; stepid u8[B, L, 20].
    """
    rng = np.random.default_rng(seed)
    B, L = batch_size, length
    last = rng.random((B, L)) < 1 / 500
    first = np.zeros((B, L), bool)
    first[:, 1:] = last[:, :-1]
    return {
        "vector": rng.standard_normal((B, L, obs_dim), dtype=np.float32),
        "action": rng.uniform(-1, 1, (B, L, action_dim)).astype(np.float32),
        "reward": rng.standard_normal((B, L), dtype=np.float32),
        "is_first": first, "is_last": last, "is_terminal": np.zeros((B, L), bool),
        "deter": rng.uniform(-1, 1, (B, L, deter)).astype(np.float32),
        "stoch": rng.integers(0, classes, (B, L, stoch)).astype(np.int32),
        "stepid": rng.integers(0, 255, (B, L, 20)).astype(np.uint8),
    }


def synthetic_obs(n_envs: int, obs_dim: int, seed: int = 1) -> dict:
    """One observation per env: vector f32[n, O] ~ N(0, 1), reward f32[n] zeros,
    is_first bool[n] (all True on the first call of an episode), is_last,
    is_terminal bool[n] False."""
    rng = np.random.default_rng(seed)
    z = np.zeros((n_envs,), bool)
    return {"vector": rng.standard_normal((n_envs, obs_dim), dtype=np.float32),
            "reward": np.zeros((n_envs,), np.float32), "is_first": z.copy(),
            "is_last": z.copy(), "is_terminal": z.copy()}


# ---- orchestrator side --------------------------------------------------------------
class WorkerError(RuntimeError):
    """A worker failed a request or died; the message names the worker and its log."""


class Worker:
    """A running worker process (see the module docstring).

    argv: the command (its python and script); log: file for its stderr;
    env: extra environment variables.
    """

    def __init__(self, name: str, argv: list[str], log: Path, env: dict | None = None):
        self.name, self.log = name, Path(log)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log, "w")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._log_file, text=True, bufsize=1,
                                     env={**os.environ, **(env or {})})

    @property
    def pid(self) -> int:
        return self.proc.pid

    def call(self, cmd: str, **args) -> Any:
        """Send one request and wait for its reply; raises WorkerError on failure."""
        self.send(cmd, **args)
        return self.recv()

    def send(self, cmd: str, **args) -> None:
        """Send one request without waiting (`recv` takes its reply): lets several
        workers compile at once."""
        self._pending, self._awaiting = cmd, True
        try:
            self.proc.stdin.write(json.dumps({"cmd": cmd, "args": args}) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass    # recv reports the dead worker

    def recv(self) -> Any:
        """The reply to the last `send`; raises WorkerError if it failed or the worker died."""
        cmd = getattr(self, "_pending", "?")
        while True:
            try:
                line = self.proc.stdout.readline()
            except OSError:
                line = ""
            if not line:
                self._awaiting = False
                raise WorkerError(f"{self.name} worker died during {cmd!r} (exit code "
                                  f"{self.proc.poll()}); its log {self.log} ends:\n"
                                  f"{self.log_tail()}")
            try:
                rep = json.loads(line)
                break
            except json.JSONDecodeError:   # a stray print on the reply stream: log it
                self._log_file.write(f"[stdout] {line}")
        self._awaiting = False
        if not rep["ok"]:
            raise WorkerError(f"{self.name} worker failed {cmd!r}: {rep['error']}\n"
                              f"{rep.get('traceback', '')}")
        return rep["result"]

    def log_tail(self, n: int = 30) -> str:
        self._log_file.flush()
        try:
            return "\n".join(self.log.read_text().splitlines()[-n:])
        except OSError:
            return ""

    def close(self) -> None:
        """Ask the worker to quit; a worker still busy with a request (the
        orchestrator failed while it worked) is terminated instead."""
        if self.proc.poll() is None:
            if getattr(self, "_awaiting", False):
                self.proc.terminate()
            else:
                try:
                    self.call("quit")
                except WorkerError:
                    pass
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log_file.close()
