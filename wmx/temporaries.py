"""Temporary files and directories that name their owner, and the sweep of dead owners' ones.

Every stage writes an artifact into a hidden temporary sibling and renames it
into place (DESIGN.md §1). A process killed before the rename leaves the
temporary behind; so that it never accumulates, each temporary's name carries
its owner, ``<prefix><hint>~<host>~<pid>~<8 hex>[suffix]``, and each stage
calls `sweep` on the folders it writes when it starts: an entry whose owner
is a process of this host that no longer runs is removed. Temporaries of a
live process, of another host (a shared data root) and names without an
owner tag are left alone. Listings skip every name that starts with ".".

Prefixes: ``.tmp-`` (being written), ``.old-`` (an artifact moved aside
while its replacement is renamed in, `wmx.evaluate.report`); in a hidden
folder (``datasets/.staging/``) the name has no prefix.
"""
from __future__ import annotations

import os
import re
import secrets
import shutil
import socket
from pathlib import Path

TMP = ".tmp-"
OLD = ".old-"

_TAG = re.compile(r"^(?P<hint>.*)~(?P<host>[^~/]+)~(?P<pid>\d+)~(?P<rand>[0-9a-f]{8})"
                  r"(?P<suffix>[^~]*)$")


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname()) or "localhost"


def owned_name(hint: str, prefix: str = TMP, suffix: str = "") -> str:
    """A fresh name ``<prefix><hint>~<host>~<pid>~<8 hex><suffix>`` owned by this process."""
    hint = str(hint).replace("~", "_").replace("/", "_")
    return f"{prefix}{hint}~{_host()}~{os.getpid()}~{secrets.token_hex(4)}{suffix}"


def make_dir(parent: str | os.PathLike, hint: str, prefix: str = TMP) -> Path:
    """Create and return an empty owned temporary directory under ``parent``
    (parents created)."""
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    path = parent / owned_name(hint, prefix)
    path.mkdir()
    return path


def owner(name: str) -> tuple[str, int] | None:
    """(host, pid) of an owned name, None for a name without an owner tag."""
    m = _TAG.match(name)
    return None if m is None else (m["host"], int(m["pid"]))


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host exists (a zombie counts as alive)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_stale(name: str) -> bool:
    """True for an owned name whose owner is a dead process of this host."""
    o = owner(name)
    return o is not None and o[0] == _host() and not pid_alive(o[1])


def sweep(folder: str | os.PathLike, hidden_only: bool = True) -> list[Path]:
    """Remove the stale temporaries directly under ``folder`` (files or folders).

    hidden_only: only names starting with ``.tmp-`` or ``.old-`` (False: any
    owned name, for a hidden staging folder). Returns what was removed; a
    missing folder, or an entry another process removes first, is no error.
    """
    folder = Path(folder)
    try:
        entries = list(folder.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []
    removed = []
    for p in entries:
        if hidden_only and not p.name.startswith((TMP, OLD)):
            continue
        if not is_stale(p.name):
            continue
        try:
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
        except FileNotFoundError:
            continue
        removed.append(p)
    return removed


def remove(path: str | os.PathLike) -> None:
    """Remove a file or a folder tree; a missing path is no error."""
    p = Path(path)
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        try:
            p.unlink()
        except FileNotFoundError:
            pass
