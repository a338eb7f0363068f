"""SIGKILL each stage at several points; nothing partial is visible, the rerun completes and
equals the uninterrupted run (slow: ~20 subprocess runs of the four stages).

Every stage runs as a real process (``python -m <stage>`` from this checkout)
with ``WMX_FAILPOINT=<point>[:n]`` (wmx.failpoints), which SIGKILLs it the
n-th time it passes the point. The reference is the same pipeline run
uninterrupted: train_online (tiny, probe-action, 2 seeds) -> beam build of
its episode sets -> train_offline on the dataset -> evaluate. After each
kill: the process died of SIGKILL, every artifact the store or a run lists
is complete, and the rerun (``--resume`` for the trainers, the same command
otherwise) exits 0, leaves no temporary behind and gives the reference's
outputs: metrics.csv (wall time aside), episode-set and dataset content
hashes and shard bytes, per_task.csv. The processes share a persistent JAX
compilation cache, so each program compiles once.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tiny_runs import TINY_ONLINE_ARGV

from wmx.datasets.store import Store

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
OFFLINE_ARGS = ["--preset", "tiny", "--batch-size", "16", "--updates", "6", "--log-every", "2",
                "--eval-every", "4", "--checkpoint-every", "2", "--eval-episodes", "2",
                "--seeds", "0", "1", "--no-progress", "--dataset", "probe@latest"]

KILLS = [
    # (stage, failpoint, how the rerun is made)
    ("online", "metrics.appended:1", "resume"),       # rows written, no checkpoint yet
    ("online", "checkpoint.written:2", "resume"),     # a checkpoint complete, not renamed
    ("online", "episode_set.staged:1", "resume"),     # the end: an episode set staged
    ("build", "build.shard_written:1", "rerun"),      # a shard written into the staging dir
    ("build", "build.finalize:1", "rerun"),           # the manifest written, not renamed
    ("offline", "metrics.appended:1", "resume"),
    ("offline", "checkpoint.written:2", "resume"),
    ("evaluate", "report.filled:1", "rerun"),         # the report complete, not renamed
    ("evaluate", "report.swapped:1", "rerun"),        # --force: the old one moved aside
]


def _env(cache: Path, point: str | None = None) -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO),
               JAX_COMPILATION_CACHE_DIR=str(cache),
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
               JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
    env.pop("WMX_FAILPOINT", None)
    if point:
        env["WMX_FAILPOINT"] = point
    return env


def _run(argv: list[str], cache: Path, point: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], cwd=REPO, env=_env(cache, point),
                          capture_output=True, text=True, timeout=1800)


def _ok(r: subprocess.CompletedProcess) -> None:
    assert r.returncode == 0, r.stderr[-3000:]


def online_argv(home: Path) -> list[str]:
    return ["-m", "wmx.train_online.cli", *TINY_ONLINE_ARGV, "--home", str(home),
            "--name", "on"]


def build_argv(home: Path, ts: Path) -> list[str]:
    return ["pipelines/build_taskset.py", "--taskset", str(ts), "--home", str(home),
            "--num_shards", "2"]


def offline_argv(home: Path) -> list[str]:
    return ["-m", "wmx.train_offline.cli", *OFFLINE_ARGS, "--home", str(home), "--name", "off"]


def evaluate_argv(home: Path, force: bool = False) -> list[str]:
    return ["-m", "wmx.evaluate.cli", "--run", str(home / "runs" / "off"), "--episodes", "2",
            *(["--force"] if force else [])]


def _rows(run_dir: Path) -> list[dict]:
    with (run_dir / "metrics.csv").open() as f:
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in csv.DictReader(f)]


def _temporaries(home: Path) -> list[Path]:
    out = [p for p in home.rglob("*") if p.name.startswith((".tmp-", ".old-"))]
    staging = home / "datasets" / ".staging"
    return out + (list(staging.iterdir()) if staging.is_dir() else [])


def _visible_is_complete(home: Path) -> None:
    """Every artifact a listing can show is complete: episode sets and datasets with
    their manifest, checkpoints with host.json, a report with report.md."""
    store = Store(home)
    for root in (store.episodes_dir, store.datasets_dir):
        for d in (root.glob("*/*") if root.is_dir() else []):
            if not d.name.startswith(".") and not d.parent.name.startswith("."):
                assert (d / "manifest.json").is_file(), f"partial artifact visible: {d}"
    for run in (store.runs_dir.iterdir() if store.runs_dir.is_dir() else []):
        if run.name.startswith("."):
            continue
        assert (run / "config.json").is_file(), f"run without config: {run}"
        for c in (run / "checkpoints").glob("[0-9]*"):
            assert (c / "host.json").is_file(), f"partial checkpoint visible: {c}"
        if (run / "report").exists():
            assert (run / "report" / "report.md").is_file(), "partial report visible"


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    """The uninterrupted pipeline: home, the build's TaskSet file, the compilation cache."""
    cache = tmp_path_factory.mktemp("jax-cache")
    home = tmp_path_factory.mktemp("ref")
    _ok(_run(online_argv(home), cache))
    sets = sorted((home / "episodes" / "probe-action").iterdir())
    info = json.loads((sets[0] / "manifest.json").read_text())["task"]
    ts = home / "probe-taskset.json"
    ts.write_text(json.dumps({"name": "probe", "reference_source": "none",
                              "tasks": [dict(info, reference_score=None)]}))
    _ok(_run(build_argv(home, ts), cache))
    _ok(_run(offline_argv(home), cache))
    _ok(_run(evaluate_argv(home), cache))
    return home, ts, cache


def _prepare(stage: str, ref_home: Path, home: Path) -> None:
    """Give ``home`` what ``stage`` reads, copied from the reference."""
    if stage in ("build", "offline", "evaluate"):
        shutil.copytree(ref_home / "episodes", home / "episodes")
    if stage in ("offline", "evaluate"):
        shutil.copytree(ref_home / "datasets", home / "datasets")
    if stage == "evaluate":           # the run, and the source run its lineage reads
        shutil.copytree(ref_home / "runs" / "off", home / "runs" / "off")
        shutil.copytree(ref_home / "runs" / "on", home / "runs" / "on")
        shutil.rmtree(home / "runs" / "off" / "report")


def _argv(stage: str, home: Path, ts: Path, force: bool = False) -> list[str]:
    return {"online": lambda: online_argv(home), "build": lambda: build_argv(home, ts),
            "offline": lambda: offline_argv(home),
            "evaluate": lambda: evaluate_argv(home, force)}[stage]()


def _same_outputs(stage: str, home: Path, ref_home: Path) -> None:
    if stage == "online":
        assert _rows(home / "runs" / "on") == _rows(ref_home / "runs" / "on")
        assert sorted(p.name for p in (home / "episodes" / "probe-action").iterdir()) == \
            sorted(p.name for p in (ref_home / "episodes" / "probe-action").iterdir())
    elif stage == "build":
        (got,) = Store(home).list_datasets()
        (want,) = Store(ref_home).list_datasets()
        assert got.content_hash == want.content_hash
        for shard in sorted(want.path.glob("shard-*")):
            assert (got.path / shard.name).read_bytes() == shard.read_bytes()
    elif stage == "offline":
        assert _rows(home / "runs" / "off") == _rows(ref_home / "runs" / "off")
        got, want = (json.loads((h / "runs" / "off" / "summary.json").read_text())
                     for h in (home, ref_home))
        assert got["final_eval_episodes"] == want["final_eval_episodes"]
    else:
        rep = "runs/off/report/per_task.csv"
        assert (home / rep).read_text() == (ref_home / rep).read_text()


@pytest.mark.parametrize("stage,point,how", KILLS, ids=[f"{s}-{p}" for s, p, _ in KILLS])
def test_sigkill_leaves_nothing_partial_and_the_rerun_equals_the_uninterrupted_run(
        ref, tmp_path, stage, point, how):
    ref_home, ts, cache = ref
    home = tmp_path / "home"
    home.mkdir()
    _prepare(stage, ref_home, home)
    force = point.startswith("report.swapped")
    if force:                                     # the report that --force replaces
        shutil.copytree(ref_home / "runs" / "off" / "report", home / "runs" / "off" / "report")
    killed = _run(_argv(stage, home, ts, force), cache, point)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    _visible_is_complete(home)
    if stage == "build":
        assert Store(home).list_datasets() == []
    if how == "resume":
        run_dir = home / "runs" / ("on" if stage == "online" else "off")
        module = "wmx.train_online.cli" if stage == "online" else "wmx.train_offline.cli"
        again = _run(["-m", module, "--resume", str(run_dir), "--no-progress"], cache)
    else:
        again = _run(_argv(stage, home, ts, force), cache)
    _ok(again)
    _visible_is_complete(home)
    assert _temporaries(home) == []
    _same_outputs(stage, home, ref_home)
