"""--resume extending a run (--env-steps / --updates) replays the longer run exactly (slow:
an online config of its own, one more compile).

The online run keeps a replay of 2 episodes (``buffer_size`` 2T), so its
checkpoints keep their shapes when the run grows; the offline run trains on
the tiny online run's episode sets (probe-action: cheap evaluations).
"""
from __future__ import annotations

import csv
import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from tiny_runs import T, TINY_RC

from wmx.runs.offline_config import OfflineRunConfig
from wmx.train_offline import cli as offline_cli
from wmx.train_offline import loop as offline_loop
from wmx.train_online import cli as online_cli
from wmx.train_online import loop as online_loop

pytestmark = pytest.mark.slow


def _rows(run_dir: Path) -> list[dict]:
    with (run_dir / "metrics.csv").open() as f:
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in csv.DictReader(f)]


def test_online_env_steps_extension_equals_the_longer_run(tmp_path):
    from wmx.datasets.store import Store
    store = Store(tmp_path).ensure_layout()
    long = dataclasses.replace(TINY_RC, env_steps=8 * T,
                               agent_overrides={**TINY_RC.agent_overrides, "buffer_size": 2 * T})
    short = dataclasses.replace(long, env_steps=4 * T)
    runs = {}
    for name, rc, stop in (("long", long, None), ("short", short, 2)):
        run_dir = store.runs_dir / name
        run_dir.mkdir()
        (run_dir / "config.json").write_text(json.dumps(rc.to_json()))
        online_loop.run(rc, run_dir, online_cli.make_export(store, rc, run_dir),
                        progress=False, stop_after_chunks=stop)
        runs[name] = run_dir
    assert online_cli.main(["--resume", str(runs["short"]), "--env-steps", str(8 * T),
                            "--no-progress"]) == 0
    assert _rows(runs["short"]) == _rows(runs["long"])
    got, want = (json.loads((runs[n] / "summary.json").read_text()) for n in ("short", "long"))
    assert [Path(p).name for p in got["episode_sets"].values()] == \
        [Path(p).name for p in want["episode_sets"].values()]
    assert json.loads((runs["short"] / "config.json").read_text())["env_steps"] == 8 * T


def test_offline_updates_extension_equals_the_longer_run(tiny_online_run, tmp_path):
    from wmx.datasets.readers import open_dataset
    from wmx.pipelines.sources import make_plan, run_build
    from wmx.schemas.manifest import EpisodeSetManifest
    from wmx.schemas.taskset import TaskSet
    home, _, _, summary = tiny_online_run
    work = tmp_path / "h"
    shutil.copytree(home / "episodes", work / "episodes")
    info = EpisodeSetManifest.load(next(iter(summary["episode_sets"].values()))).task
    ds = open_dataset(run_build(make_plan(work, TaskSet("probe", (info,), (None,), "none"))))
    base = OfflineRunConfig(dataset=f"probe@{ds.content_hash}", taskset=ds.taskset.to_dict(),
                            seeds=(0, 1), updates=6, batch_size=16, preset="tiny", log_every=2,
                            eval_every=4, checkpoint_every=2, eval_episodes=2)
    runs = {}
    for name, rc, stop in (("long", base, None), ("short", dataclasses.replace(base, updates=4),
                                                     1)):
        run_dir = work / "runs" / name
        run_dir.mkdir(parents=True)
        (run_dir / "config.json").write_text(json.dumps(rc.to_json()))
        offline_loop.run(rc, run_dir, home=work, progress=False, stop_after_chunks=stop)
        runs[name] = run_dir
    assert offline_cli.main(["--resume", str(runs["short"]), "--updates", "6",
                             "--no-progress"]) == 0
    assert _rows(runs["short"]) == _rows(runs["long"])
    assert offline_cli.main(["--resume", str(runs["short"]), "--updates", "8"]) == 2   # finished
