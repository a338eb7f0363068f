"""The failures test_faults_*.py inject, for real (slow: each is a train_online process).

- out of memory: ``--batch-size 1e9`` under an address-space limit (RLIMIT_AS
  6 GB, so the test cannot exhaust the machine): XLA's allocation fails;
- full disk: the data root on a 300 KB tmpfs (skipped where mounting is not
  permitted);
- read-only data root: a read-only tmpfs (same).

Each ends in one line on stderr, exit 1 (2 for the read-only root, bad
input), and leaves nothing a rerun trips over.
"""
from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tiny_runs import TINY_ONLINE_ARGV

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def _train_online(home: Path, *extra: str, limit_as: int | None = None):
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO))

    def limit():
        if limit_as:
            resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))
    return subprocess.run([sys.executable, "-m", "wmx.train_online.cli", *TINY_ONLINE_ARGV,
                           "--home", str(home), "--name", "r", *extra], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=1800, preexec_fn=limit)


def _error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if "error:" in ln]


def _leftovers(home: Path) -> list[Path]:
    return [p for p in home.rglob("*") if p.name.startswith((".tmp-", ".old-"))]


def test_out_of_memory_batch_is_one_line(tmp_path):
    r = _train_online(tmp_path, "--batch-size", "1e9", limit_as=6 << 30)
    assert r.returncode == 1, r.stderr[-3000:]
    (line,) = _error_lines(r.stderr)
    assert line.startswith("train_online: error: out of memory") and "--batch-size" in line
    run_dir = tmp_path / "runs" / "r"
    if run_dir.exists():            # failed after a checkpoint: kept, and the line says so
        assert "--resume" in line and any((run_dir / "checkpoints").iterdir())
    assert not _leftovers(tmp_path)


@pytest.fixture
def mounted(tmp_path):
    mounts = []

    def mount(name: str, options: str) -> Path:
        d = tmp_path / name
        d.mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(d)],
                           capture_output=True, text=True)
        if r.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
        mounts.append(d)
        return d
    yield mount
    for d in mounts:
        subprocess.run(["umount", str(d)], capture_output=True)


def test_full_disk_is_one_line_and_leaves_nothing(mounted):
    home = mounted("small", "size=300k")
    r = _train_online(home)
    assert r.returncode == 1, r.stderr[-3000:]
    (line,) = _error_lines(r.stderr)
    assert line.startswith("train_online: error: no space left on the device")
    assert not (home / "runs" / "r").exists() and not _leftovers(home)


def test_read_only_home_is_one_line(mounted):
    home = mounted("ro", "size=1m,ro") / "home"
    r = _train_online(home)
    assert r.returncode == 2, r.stderr[-3000:]
    (line,) = _error_lines(r.stderr)
    assert "cannot write to the data root" in line and "Read-only file system" in line
