"""The official DreamerV3 env processes, as `official_dreamerv3.py` starts and watches them.

Their signal handling and black frames (`_ignore_signals`, `_no_render`, `_make_env_fn`),
the environment they start with (`env_process_environ`), and a wait for an answer that ends
with an error when the process died (`wait_for_answer`, `exit_text`).
"""
from __future__ import annotations

import os
import signal

def _ignore_signals() -> None:
    """In the official env processes: ignore SIGTERM and SIGINT (``timeout`` signals the
    whole process group; the main process stops the loop and then the envs)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _no_render() -> None:
    """Make dm_control's ``Physics.render`` return black frames (no OpenGL needed)."""
    import numpy as np
    from dm_control.mujoco import engine

    def render(self, height=240, width=320, *args, **kwargs):
        return np.zeros((height, width, 3), np.uint8)

    engine.Physics.render = render


def _make_env_fn(official_make_env, render: bool):
    """``official_make_env`` (config, index) with the black-frame patch applied first in
    the process that builds the env (`_no_render`) unless ``render``."""
    def make_env(config, index, **kw):
        if not render:
            os.environ.setdefault("MUJOCO_GL", "off")
            _no_render()
        return official_make_env(config, index, **kw)
    return make_env


ENV_PROCESS_ENVIRON = {"JAX_PLATFORMS": "cpu", "MUJOCO_GL": "off"}
"""The environment the official env processes start with (`env_process_environ`): JAX,
which they import with the official packages but never use, kept on the CPU (on the TPU
machine one process at a time may open the chip: a second one dies with a libtpu lockfile
error); MUJOCO_GL off unless set (no OpenGL there)."""


class env_process_environ:
    """Context: ``os.environ`` as the official env processes need it while they start (the
    official driver spawns them; a spawned process copies the environment at its start),
    restored on exit. ``JAX_PLATFORMS`` is set to "cpu" whatever its value (this process's
    JAX read it when imported: changing it now changes nothing here); ``MUJOCO_GL`` only
    when unset."""

    def __enter__(self):
        self._saved = {k: os.environ.get(k) for k in ENV_PROCESS_ENVIRON}
        os.environ["JAX_PLATFORMS"] = ENV_PROCESS_ENVIRON["JAX_PLATFORMS"]
        os.environ.setdefault("MUJOCO_GL", ENV_PROCESS_ENVIRON["MUJOCO_GL"])
        return self

    def __exit__(self, *exc):
        for k, v in self._saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        return False


def exit_text(code: int | None) -> str:
    """How a process ended, in words, from its exit status (negative: the signal that ended
    it, as Python's subprocess and multiprocessing report it; 128 + N: a shell's report of
    signal N)."""
    if code is None:
        return "has not ended"
    sig = -code if code < 0 else (code - 128 if 128 < code < 160 else None)
    if sig is not None:
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"was ended by {name} (status {code})"
    return f"exited with status {code}"


def wait_for_answer(pipe, proc, index: int, poll_s: float = 1.0) -> None:
    """Wait until ``pipe`` holds an answer of env process ``index``; raise RuntimeError when
    the process ended without one (the official driver's ``pipe.recv`` would block for
    ever: this process keeps the other end of the pipe open).

    Args:
      pipe: the driver's end of the env's pipe (``poll(timeout)``).
      proc: the env's official ``StoppableProcess`` (``running``, ``exitcode``, ``name``).
      index: the env's index (for the message).
      poll_s: how often to look at the process.
    """
    while not pipe.poll(poll_s):
        if not proc.running:
            if pipe.poll(0):   # it answered just before it ended
                return
            how = exit_text(proc.exitcode)
            raise RuntimeError(f"env process {index} ({proc.name}) {how} without answering "
                               "the driver; its own output, above in the log, says why")


