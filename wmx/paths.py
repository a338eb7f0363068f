"""Locations wmx reads from: the shared reference folder and the data root."""
from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def shared_dir() -> Path:
    """The project's shared folder (spec, fixtures, reference curves).

    `WMX_SHARED` overrides; otherwise `<repo>/../shared`. Raises
    FileNotFoundError naming both places when neither exists.
    """
    env = os.environ.get("WMX_SHARED")
    path = Path(env) if env else REPO_ROOT.parent / "shared"
    if not path.is_dir():
        raise FileNotFoundError(
            f"shared folder not found at {path}; set WMX_SHARED to the folder "
            "that holds spec/, fixtures/ and reference/")
    return path


def wmx_home(home: str | os.PathLike | None = None) -> Path:
    """The one data root for everything wmx writes.

    Order: the explicit `home` argument (`--home`), then `WMX_HOME`, then
    `~/.wmx`. The folder is not created here.
    """
    if home is not None:
        return Path(home).expanduser().resolve()
    env = os.environ.get("WMX_HOME")
    if env:
        return Path(env).expanduser().resolve()
    return (Path.home() / ".wmx").resolve()
