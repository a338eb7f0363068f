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


class HomeError(ValueError):
    """The data root is unusable: a file, or not writable where a stage must write."""


def wmx_home(home: str | os.PathLike | None = None) -> Path:
    """The one data root for everything wmx writes.

    Args:
      home: the `--home` value, or None for `WMX_HOME`, else `~/.wmx`.

    Returns:
      The absolute path; the folder is not created here.

    Raises:
      HomeError: the path, or a folder above it, is a file (nothing is created).
    """
    env = os.environ.get("WMX_HOME")
    if home is not None:
        path, given = Path(home).expanduser().resolve(), f"--home {home}"
    elif env:
        path, given = Path(env).expanduser().resolve(), f"WMX_HOME={env}"
    else:
        path, given = (Path.home() / ".wmx").resolve(), "the default data root ~/.wmx"
    _refuse_file(path, given)
    return path


def nearest_existing(path: Path) -> Path | None:
    """``path`` or its nearest ancestor that exists (where a write under ``path`` lands);
    None when one cannot be checked (OSError: an unreadable folder)."""
    for p in (path, *path.parents):
        try:
            if p.exists():
                return p
        except OSError:
            return None
    return None


def _refuse_file(path: Path, given: str) -> None:
    """Raise HomeError when `path` or its nearest existing ancestor is not a directory (one
    that cannot be checked is left to the stage that writes there)."""
    p = nearest_existing(path)
    if p is not None and not p.is_dir():
        raise HomeError(f"{given}: {p} is a file, not a directory; give a directory as the "
                        "data root (--home DIR or WMX_HOME; it is created if missing)")
