"""`evaluate --run` on an offline multi-task run: TaskSet subset, padded planner, lineage.

The run is built by hand (no training: its checkpoint holds the initial
carries, which is all the evaluator restores) over a synthetic dataset of the
two probe tasks, so the evaluation envs are the cheap probe envs.
"""
import json

import numpy as np
import pytest

from store_fixtures import task_info, write_dataset, write_source_run, write_source_set
from wmx.checkpoint import save_checkpoint
from wmx.evaluate import cli
from wmx.runs.host import HostState
from wmx.runs.offline_config import OfflineRunConfig
from wmx.train_offline import program

T = 10
TASKS = ("probe-constant", "probe-action")


def _config(ds, **kw) -> OfflineRunConfig:
    """A tiny offline run config on dataset ``ds`` (2 seeds, 2 updates), ``kw`` added."""
    return OfflineRunConfig(dataset=f"probes@{ds.content_hash}", taskset=ds.taskset.to_dict(),
                            seeds=(0, 1), updates=2, preset="tiny", log_every=2, eval_every=2,
                            checkpoint_every=2, eval_episodes=2, **kw)


def _hand_built_run(home, name: str, rc: OfflineRunConfig):
    """home/runs/<name> of ``rc`` without training: config.json (code version c0ffee) and a
    checkpoint at 2 updates holding the initial carries. Returns the run directory."""
    run_dir = home / "runs" / name
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps({**rc.to_json(), "code_version": "c0ffee"}))
    carries = program.init_carries(rc.agent_module, rc.agent_config, rc.seeds)
    save_checkpoint(run_dir, 2, program.checkpoint_items(carries),
                    HostState(updates=2, eval_index=1).to_json())
    return run_dir


@pytest.fixture(scope="module")
def offline_run(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    sets = [write_source_set(home, task_info(t, T), seed=i) for i, t in enumerate(TASKS)]
    ds = write_dataset(home, "probes", sets)
    write_source_run(home, "src-1", [{"seed": 1, "kind": "eval", "env_steps": 120,
                                      "return": 7.5}])
    run_dir = _hand_built_run(home, "off", _config(ds, batch_size=8))
    return home, run_dir, sets, ds


def test_offline_run_evaluates_a_task_subset_with_lineage(offline_run, capsys):
    home, run_dir, sets, ds = offline_run
    assert cli.main(["--run", run_dir, "--episodes", 2, "--tasks", "probe-action"]) == 0
    assert capsys.readouterr().out.strip() == str(run_dir / "report" / "report.md")
    rep = json.loads((run_dir / "report" / "report.json").read_text())
    assert rep["run"]["kind"] == "offline" and rep["run"]["updates"] == 2
    (row,) = rep["per_task"]
    assert row["task"] == "probe-action"
    rets = np.array(list(rep["returns"]["probe-action"].values()))
    assert rets.shape == (2, 2) and np.all(np.abs(rets) <= T)
    assert row["score"] == pytest.approx(rets.mean() / 10)
    # source of probe-action: run src-1 exists -> its last eval row
    assert (row["source_return"], row["source_basis"], row["source_env_steps"]) == \
        (7.5, "run", 120)
    assert row["ratio"] == pytest.approx(rets.mean() / 7.5)
    lin = rep["lineage"]
    assert lin["dataset"] == f"probes@{ds.content_hash}" and lin["code_version"] == "c0ffee"
    assert sorted(s["content_hash"] for s in lin["sources"]) == \
        sorted(m.content_hash for m in sets)
    md = (run_dir / "report" / "report.md").read_text()
    assert f"probes@{ds.content_hash}" in md and "src-0" in md and "episode_set" in md
    assert "an offline run takes no env step of its own" in md   # why the sources' steps


def test_task_outside_the_taskset_is_refused(offline_run, capsys):
    _, run_dir, _, _ = offline_run
    assert cli.main(["--run", run_dir, "--tasks", "walker-walk", "--out",
                     run_dir / "other"]) == 2
    err = capsys.readouterr().err
    assert "walker-walk" in err and "probe-constant" in err and "probe-action" in err
    assert not (run_dir / "other").exists()


@pytest.fixture(scope="module")
def dreamerv3_run(offline_run):
    """A DreamerV3 offline run (multi-task, W-D8) on the same dataset, built like
    `offline_run` (its checkpoint holds the initial carries)."""
    home, _, _, ds = offline_run
    rc = _config(ds, agent="dreamerv3")
    assert rc.multitask
    return _hand_built_run(home, "dv3", rc)


def test_dreamerv3_and_tdmpc2_offline_runs_side_by_side(offline_run, dreamerv3_run, tmp_path,
                                                        capsys):
    """`evaluate --runs` on a TD-MPC2 and a DreamerV3 offline run of one dataset (issue 14):
    per-task returns of both, aggregates per run, the source agents' returns."""
    home, run_dir, _, ds = offline_run
    out = tmp_path / "cmp"
    assert cli.main(["--runs", run_dir, dreamerv3_run, "--out", out, "--episodes", 2]) == 0
    assert capsys.readouterr().out.strip() == str(out / "compare.md")
    rep = json.loads((dreamerv3_run / "report" / "report.json").read_text())
    assert rep["run"]["kind"] == "offline" and rep["lineage"]["dataset"] == \
        f"probes@{ds.content_hash}"
    rets = np.array([list(rep["returns"][t].values()) for t in TASKS])
    assert rets.shape == (2, 2, 2) and np.all(np.abs(rets) <= T)
    by_task = {r["task"]: r for r in rep["per_task"]}
    assert by_task["probe-action"]["source_return"] == 7.5     # from the lineage, as TD-MPC2's
    # each report names its own agent's eval actions (DreamerV3 samples; TD-MPC2 plans)
    tdmpc2_rep = json.loads((run_dir / "report" / "report.json").read_text())
    assert "sampled from the actor" in rep["evaluation"]["protocol"]
    assert "MPPI" not in rep["evaluation"]["protocol"]
    assert "MPPI" in tdmpc2_rep["evaluation"]["protocol"]
    assert "Protocol: actions sampled" in (dreamerv3_run / "report" / "report.md").read_text()
    import csv
    with (out / "per_task.csv").open() as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["task", "off", "dv3", "source_return", "off_ratio", "dv3_ratio"]
    assert {r[0] for r in rows[1:]} == set(TASKS)
    assert all(r[2] != "" for r in rows[1:])                   # DreamerV3 on every task
    (action,) = [r for r in rows[1:] if r[0] == "probe-action"]
    assert float(action[3]) == 7.5 and float(action[5]) == pytest.approx(
        by_task["probe-action"]["return_mean"] / 7.5)          # each run's own return
    c = json.loads((out / "compare.json").read_text())
    assert set(c["aggregates"]) == {"off", "dv3"}
    assert [(r["label"], r["agent"]) for r in c["runs"]] == [("off", "tdmpc2"),
                                                             ("dv3", "dreamerv3")]
    assert [a["statistic"] for a in c["aggregates"]["dv3"]] == ["mean", "median", "iqm"]
    md = (out / "compare.md").read_text()
    assert "dv3" in md and "off" in md
    assert "| dv3 | dreamerv3 | offline |" in md and "| off | tdmpc2 | offline |" in md
