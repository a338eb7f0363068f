"""A pooled build stopped by a signal, and a build on a data root it cannot write.

- SIGTERM or Ctrl-C (SIGINT) in the middle of ``beam run pipelines/build_taskset.py``
  (sent by the process to itself at a failpoint, `wmx.failpoints`): one line, exit
  128 + the signal (143, 130), no dataset, no staging folder left;
- a signal whose exception the pipeline swallows (Beam rewraps an exception raised in a
  step, Python drops one raised in a garbage-collector callback) still leaves nothing:
  the dataset is not put in place once a signal came;
- a second signal while the build stops exits at once and removes what it wrote;
- a read-only data root is bad input: one line, exit 2, nothing written.

Each case builds 2 small synthetic episode sets (8 episodes); the signal cases run the job
in a subprocess (a SIGTERM must not reach the test process).
"""
from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipelines"))
from episode_fixtures import synthetic_episode, taskset_of, write_set  # noqa: E402

from wmx import failpoints  # noqa: E402
from wmx.cli.beam import main as beam_main  # noqa: E402
from wmx.datasets.store import Store  # noqa: E402
from wmx.schemas.taskset import TaskInfo  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
JOB = REPO / "pipelines" / "build_taskset.py"
T = 8
TASKS = (TaskInfo("task-a", 3, 1, T, 2, 0.9), TaskInfo("task-b", 4, 2, T, 2, 0.95))


@pytest.fixture
def home(tmp_path):
    """A data root with one episode set per task (4 episodes each) and the TaskSet JSON."""
    rng = np.random.default_rng(7)
    for i, info in enumerate(TASKS):
        write_set(tmp_path, info, [synthetic_episode(rng, T, info.obs_dim, info.action_dim)
                                   for _ in range(4)], seed=i)
    (tmp_path / "ts.json").write_text(taskset_of("tst", TASKS).to_json())
    return tmp_path


def _argv(home: Path) -> list[str]:
    return [str(JOB), "--taskset", str(home / "ts.json"), "--home", str(home),
            "--num_shards", "2"]


def _nothing_written(home: Path) -> bool:
    staging = home / "datasets" / ".staging"
    return Store(home).list_datasets() == [] and (
        not staging.exists() or not any(staging.iterdir()))


def _errors(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.strip() and " INFO " not in ln
            and not ln.startswith(("INFO", "WARNING"))]


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_signal_during_the_build_stops_it_and_writes_nothing(home, sig):
    env = dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu",
               WMX_FAILPOINT=f"build.shard_written:1:{sig}")
    r = subprocess.run([sys.executable, *_argv(home)], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 128 + getattr(signal, sig), r.stderr[-3000:]
    said = "Ctrl-C" if sig == "SIGINT" else sig
    (line,) = _errors(r.stderr)
    assert line.startswith(f"error: interrupted by {said}: the build stopped and nothing "
                           "was written"), line
    assert "run the same command again" in line
    assert _nothing_written(home)


def test_a_signal_the_pipeline_swallows_still_writes_nothing(home, monkeypatch, capsys):
    """The signal's exception is swallowed inside the pipeline (where Beam or Python drop
    it) and the build goes on to its end: the dataset is not put in place."""
    real = failpoints.hit

    def swallowed(name):
        if name == "build.finalize":
            try:                       # in-memory runner: this step runs in the main thread
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1)              # the handler runs here at the latest
            except KeyboardInterrupt:
                pass
        real(name)
    monkeypatch.setattr(failpoints, "hit", swallowed)
    assert beam_main(["run", *_argv(home)]) == 128 + signal.SIGINT
    (line,) = _errors(capsys.readouterr().err)
    assert "interrupted by Ctrl-C" in line and "nothing was written" in line
    assert _nothing_written(home)


def test_a_second_signal_while_the_build_stops_exits_at_once(tmp_path):
    staging = tmp_path / "staging"
    code = (
        "import os, signal, sys\n"
        "from wmx.pipelines.interrupt import BuildInterrupted, guard_build\n"
        f"os.makedirs({str(staging)!r})\n"
        f"with guard_build({str(staging)!r}) as g:\n"
        "    try:\n"
        "        g.handler(signal.SIGTERM, None)\n"
        "    except BuildInterrupted as e:\n"
        "        assert e.signum == signal.SIGTERM\n"
        "    g.handler(signal.SIGINT, None)\n"
        "print('not reached')\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
    assert r.returncode == 128 + signal.SIGTERM, r.stderr
    assert "not reached" not in r.stdout and not staging.exists()
    assert r.stderr.strip() == "Ctrl-C again: the build stops now; nothing was written"


def test_read_only_data_root_is_bad_input(home, monkeypatch, capsys):
    real = os.mkdir

    def mkdir(path, *a, **k):
        if str(path).startswith(str(home / "datasets")):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real(path, *a, **k)
    monkeypatch.setattr(os, "mkdir", mkdir)
    before = sorted(home.rglob("*"))
    assert beam_main(["run", *_argv(home)]) == 2
    (line,) = _errors(capsys.readouterr().err)
    assert line == (f"error: cannot write to the data root {home} (--home / WMX_HOME): "
                    "Read-only file system; give a writable directory")
    assert sorted(home.rglob("*")) == before
