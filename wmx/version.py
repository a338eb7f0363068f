"""Versions a stage records in what it writes: the wmx code and the simulator stack.

`code_version` goes into run configs and episode-set producers, `env_versions`
into episode-set manifests (DESIGN.md §4), so a report can name the code that
produced each artifact; `device_label` names the device a run or call ran on.
"""
from __future__ import annotations

import importlib.metadata
import os
import subprocess

from wmx.paths import REPO_ROOT


CODE_VERSION_ENV = "WMX_CODE_VERSION"
"""Names the code of a checkout copied without its ``.git`` (e.g. the working tree sent to
a device machine), where git cannot: set it to the commit the copy was made from."""


def code_version() -> str:
    """The git commit of the wmx checkout (with "-dirty" when tracked files
    differ from it), else ``$WMX_CODE_VERSION`` (a copy without ``.git``: see
    `CODE_VERSION_ENV`), else "wmx-<package version>", else "unknown"."""
    try:
        head = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"],
                              capture_output=True, text=True, timeout=10)
        if head.returncode == 0 and head.stdout.strip():
            dirty = subprocess.run(
                ["git", "-C", str(REPO_ROOT), "diff", "--quiet", "HEAD", "--"],
                capture_output=True, timeout=30).returncode != 0
            return head.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    if os.environ.get(CODE_VERSION_ENV, "").strip():
        return os.environ[CODE_VERSION_ENV].strip()
    try:
        return "wmx-" + importlib.metadata.version("wmx")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def env_versions() -> dict[str, str]:
    """Installed versions of the simulator stack, read from package metadata
    (no import): mujoco, mujoco-mjx, playground; absent ones are omitted."""
    out = {}
    for dist in ("mujoco", "mujoco-mjx", "playground"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def device_label() -> str:
    """JAX's first device in words, ``"<platform>: <device kind>"``, e.g.
    ``"tpu: TPU v5 lite"`` or ``"cpu: cpu"`` (initialises JAX's backend)."""
    import jax
    d = jax.devices()[0]
    return f"{d.platform}: {d.device_kind}"
