"""The OpenGL backend MuJoCo renders evaluation videos with (``MUJOCO_GL``).

MuJoCo's Python package reads ``MUJOCO_GL`` once, when ``mujoco`` is first
imported, and keeps that backend for the life of the process. So
`choose_gl_backend` must run before anything imports ``mujoco`` (the
Playground envs do): it tries each candidate in a short subprocess that opens
an offscreen context, and sets ``MUJOCO_GL`` to the first that works. A
``MUJOCO_GL`` set by the user is the only candidate (it wins). Headless
Linux backends, in order: ``egl`` (Mesa or a GPU driver's EGL), ``osmesa``
(Mesa's software rasteriser). See README.md "Evaluation videos".
"""
from __future__ import annotations

import functools
import os
import subprocess
import sys
from typing import Callable

__all__ = ["GL_BACKENDS", "NoGLBackend", "pick_backend", "choose_gl_backend", "render_once"]

GL_BACKENDS = ("egl", "osmesa")
"""Candidates tried in order when MUJOCO_GL is not set."""

INSTALL_HINT = ("install EGL (Debian/Ubuntu: apt-get install libegl1 libgl1-mesa-dri) or "
                "OSMesa (apt-get install libosmesa6), or set MUJOCO_GL to a backend that works "
                "here")

_PROBE = ("from wmx.evaluate.gl_backend import render_once\n"
          "render_once()\n")
_PROBE_TIMEOUT_S = 120


class NoGLBackend(ValueError):
    """No OpenGL backend can render here; the message names what to install (exit 2)."""


def pick_backend(user: str | None, works: Callable[[str], str | None]) -> str:
    """The backend to use: ``user`` (MUJOCO_GL as set, wins) or the first of GL_BACKENDS.

    works(name) -> None when the backend renders, else a one-line reason.
    Raises NoGLBackend naming the backends tried, their reasons and what to
    install.
    """
    user = (user or "").strip().lower()
    if user:
        why = works(user)
        if why is None:
            return user
        raise NoGLBackend(f"MUJOCO_GL={user} (set in the environment) cannot render here "
                          f"({why}); unset it to try {' then '.join(GL_BACKENDS)}, or "
                          f"{INSTALL_HINT}")
    reasons = []
    for name in GL_BACKENDS:
        why = works(name)
        if why is None:
            return name
        reasons.append(f"{name}: {why}")
    raise NoGLBackend(f"no OpenGL backend renders here ({'; '.join(reasons)}); {INSTALL_HINT}")


@functools.lru_cache(maxsize=None)
def _works_in_subprocess(name: str) -> str | None:
    env = {**os.environ, "MUJOCO_GL": name}
    try:
        r = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True,
                           text=True, timeout=_PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"no context within {_PROBE_TIMEOUT_S} s"
    if r.returncode == 0:
        return None
    lines = [ln.strip() for ln in r.stderr.splitlines() if ln.strip()]
    return lines[-1][:200] if lines else f"exit status {r.returncode}"


def render_once() -> None:
    """Render one 16 x 16 frame of an empty model with the backend mujoco was imported with.

    A GL context alone is not proof: GLFW without a display makes a null
    window with warnings only, and mujoco fails when it makes its render
    context. Raises whatever mujoco raises when it cannot render.
    """
    import mujoco
    model = mujoco.MjModel.from_xml_string("<mujoco><worldbody><light/></worldbody></mujoco>")
    data = mujoco.MjData(model)
    with mujoco.Renderer(model, height=16, width=16) as renderer:
        renderer.update_scene(data)
        renderer.render()


def _works_in_process(name: str) -> str | None:
    try:
        render_once()
    except Exception as err:  # noqa: BLE001 - any failure means: cannot render
        return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:200]
    return None


def _imported_backend() -> str:
    """The MUJOCO_GL value the already imported mujoco read (its gl_context module keeps
    it; mujoco >= 4 moved that module under rendering.classic)."""
    for mod in ("mujoco.rendering.classic.gl_context", "mujoco.gl_context"):
        value = getattr(sys.modules.get(mod), "_MUJOCO_GL", None)
        if value is not None:
            return value
    return os.environ.get("MUJOCO_GL", "")


def choose_gl_backend() -> str:
    """Set MUJOCO_GL to a backend that renders offscreen here and return its name.

    Before ``mujoco`` is imported: MUJOCO_GL as the user set it, else egl,
    then osmesa, each checked in a subprocess (about a second; cached per
    name), and MUJOCO_GL is set for this process. After: mujoco's backend is
    fixed, so only it is checked, in this process. Raises NoGLBackend (one
    line naming what to install) when none works.
    """
    if "mujoco" in sys.modules:
        current = _imported_backend()
        why = _works_in_process(current)
        if why is None:
            return current or "default"
        raise NoGLBackend(f"mujoco was imported in this process with MUJOCO_GL="
                          f"{current or '(unset)'}, which cannot render here ({why}); start "
                          f"again with MUJOCO_GL=egl or osmesa set, or {INSTALL_HINT}")
    name = pick_backend(os.environ.get("MUJOCO_GL"), _works_in_subprocess)
    os.environ["MUJOCO_GL"] = name
    return name
