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


def _resolve(home: str | os.PathLike | None) -> tuple[Path, str]:
    """(absolute data root, how it was chosen) of ``home`` (see `wmx_home`)."""
    env = os.environ.get("WMX_HOME")
    if home is not None:
        return Path(home).expanduser().resolve(), f"--home {home}"
    if env:
        return Path(env).expanduser().resolve(), f"WMX_HOME={env}"
    return (Path.home() / ".wmx").resolve(), "the default data root ~/.wmx"


def wmx_home(home: str | os.PathLike | None = None) -> Path:
    """The one data root for everything wmx writes.

    Args:
      home: the `--home` value, or None for `WMX_HOME`, else `~/.wmx`.

    Returns:
      The absolute path; the folder is not created here.

    Raises:
      HomeError: the path, or a folder above it, is a file (nothing is created).
    """
    path, given = _resolve(home)
    _refuse_file(path, given)
    return path


def looked_in(home: str | os.PathLike | None = None) -> str:
    """How the data root of ``home`` was chosen and how to choose another: the words an empty
    listing puts after the folder it read.

    Args:
      home: the `--home` value, or None.

    Returns:
      e.g. ``"the default data root ~/.wmx; another with --home DIR or WMX_HOME=DIR"``.
    """
    return f"{_resolve(home)[1]}; another with --home DIR or WMX_HOME=DIR"


def home_flag(home: str | os.PathLike) -> list[str]:
    """``["--home", DIR]`` for a command that must reach the data root ``home``, or [] when
    the commands reach it without the flag (it is the root `wmx_home(None)` resolves to now).

    Args:
      home: a data root.

    Returns:
      The argument list to add to a printed follow-up command.
    """
    path = Path(home).expanduser().resolve()
    return [] if path == _resolve(None)[0] else ["--home", str(path)]


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
