"""Which process trains a run: the run lock ``<run>/run.lock`` that a trainer holds while it runs.

A trainer (``train_online``, ``train_offline``) takes an exclusive ``flock``
on ``<run>/run.lock`` before it touches the run and keeps it until it exits;
the file holds its owner as JSON (host, pid, start time, command). The
kernel drops the lock when the process ends in any way (exit, exception,
``kill -9``, a crashed host's NFS lease running out), so "the lock is held"
is the honest test of "the run is being trained", and it makes a second
trainer of the same run (two ``--resume`` of one directory) fail at once with
one line instead of interleaving checkpoints. `probe` asks without taking
the lock for more than an instant; a trainer that meets a probe's instant
retries for `ACQUIRE_RETRY_S` before it calls the run busy.

The trainer removes the file (still holding the lock) when it ends, so a run
it trained, or refused to train (bad input found after the lock was taken),
is left as it was; a killed trainer leaves it behind, unlocked, which reads
as "not running". A trainer that locks a file another one removed meanwhile
sees that the path no longer names its file and starts over, so two trainers
never hold two different files of one run.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

LOCK_NAME = "run.lock"
ACQUIRE_RETRY_S = 2.0
"""How long a trainer retries a held lock (a reader's probe holds it for microseconds)."""


class RunBusyError(ValueError):
    """Another live process trains the run (bad input for a trainer: exit status 2)."""


@dataclass(frozen=True)
class Owner:
    """The process that holds a run's lock: host, pid, started (ISO time), command
    (its argv joined by spaces); fields are empty / 0 when its file is unreadable."""

    host: str = ""
    pid: int = 0
    started: str = ""
    command: str = ""

    def describe(self) -> str:
        """``pid 123 on host h since 2026-12-01T19:00:00`` (what is known of it)."""
        who = f"pid {self.pid}" if self.pid else "a process"
        if self.host:
            who += f" on {self.host}"
        return who + (f" since {self.started}" if self.started else "")


def _read_owner(fd: int) -> Owner:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        d = json.loads(os.read(fd, 1 << 16).decode() or "{}")
        return Owner(host=str(d.get("host", "")), pid=int(d.get("pid", 0)),
                     started=str(d.get("started", "")), command=str(d.get("command", "")))
    except (OSError, ValueError, TypeError):
        return Owner()


@contextlib.contextmanager
def hold_run(run_dir: str | os.PathLike) -> Iterator[Owner]:
    """Hold ``<run_dir>/run.lock`` for the block (this process is the run's trainer).

    Yields this process's `Owner`. Raises `RunBusyError` (a ValueError: one
    line naming the other process's pid and host) when another live process
    holds it after `ACQUIRE_RETRY_S`, FileNotFoundError when ``run_dir`` does
    not exist. On a filesystem without ``flock`` (ENOLCK / EOPNOTSUPP) the run
    goes ahead unlocked and `probe` falls back to the pid in the file.
    """
    path = Path(run_dir) / LOCK_NAME
    deadline = time.monotonic() + ACQUIRE_RETRY_S
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            locked = _acquire(fd, path, deadline)
        except BaseException:
            os.close(fd)
            raise
        if not locked or _same_file(fd, path):
            break
        os.close(fd)                  # its holder removed it on release: lock the new one
    try:
        me = Owner(host=socket.gethostname(), pid=os.getpid(),
                   started=time.strftime("%Y-%m-%dT%H:%M:%S"),
                   command=" ".join(os.path.basename(a) if i == 0 else a
                                    for i, a in enumerate(sys.argv))[:500])
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, json.dumps(me.__dict__).encode())
        yield me
    finally:
        with contextlib.suppress(OSError):
            if not locked or _same_file(fd, path):
                os.unlink(path)              # removed while still held
        os.close(fd)                         # drops the lock


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        a, b = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _acquire(fd: int, path: Path, deadline: float) -> bool:
    """Take the exclusive lock, retrying until ``deadline`` (``time.monotonic()``);
    False when the filesystem has no flock."""
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                other = _read_owner(fd)
                raise RunBusyError(
                    f"run {path.parent} is being trained by {other.describe()}"
                    f"{' (' + other.command + ')' if other.command else ''}; wait for it to "
                    "end or stop it, then --resume") from None
            time.sleep(0.05)
        except OSError as e:
            if e.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                return False
            raise


def probe(run_dir: str | os.PathLike) -> Owner | None:
    """The live `Owner` of a run, or None when no process trains it.

    Tries a shared lock without waiting: refused means a trainer holds the
    exclusive one (its owner is read from the file); granted means none does
    (released at once). A missing lock file is None. Without flock on the
    filesystem: the owner written in the file when its pid is a live process
    of this host (`wmx.temporaries.pid_alive`), else None.
    """
    path = Path(run_dir) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_owner(fd)
        except OSError as e:
            if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                raise
            from wmx.temporaries import pid_alive
            o = _read_owner(fd)
            return o if o.pid and o.host == socket.gethostname() and pid_alive(o.pid) else None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
