"""benchmarks/learning/dreamerv3_offline.py's verdict and its TD-MPC2 pairing (no training:
the check itself takes hours and is not part of the suite)."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest

_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "learning"
sys.path.insert(0, str(_DIR))
_SPEC = importlib.util.spec_from_file_location("dreamerv3_offline", _DIR / "dreamerv3_offline.py")
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


def _tasks(**final):
    return {t: {"runs": [f"runs/{t}"], "per_seed": [r], "final_return": r}
            for t, r in final.items()}


def test_every_learned_task_must_reach_half_the_source():
    tasks = _tasks(**{"cartpole-balance": 800.0, "reacher-easy": 400.0, "acrobot-swingup": 20.0})
    curves = {"cartpole-balance": {1000: [300.0, 500.0], 2000: [420.0, 400.0]},
              "reacher-easy": {1000: [100.0], 2000: [250.0]},
              "acrobot-swingup": {2000: [0.0]}}
    res = bench.judge(tasks, curves, learned_min=100.0)
    per = res["tasks"]
    assert per["cartpole-balance"]["offline_final_return"] == 410.0
    assert per["cartpole-balance"]["pass"] and per["reacher-easy"]["pass"]
    assert per["acrobot-swingup"]["pass"] is None          # the source did not learn it
    assert res["passed"] and res["tasks_learned_by_source"] == res["tasks_passing"] == 2
    curves["reacher-easy"][2000] = [150.0]                  # below 0.5 x 400: fails
    res = bench.judge(tasks, curves, learned_min=100.0)
    assert res["tasks"]["reacher-easy"]["pass"] is False and not res["passed"]
    # nothing learned by the sources: no evidence, no pass
    assert not bench.judge(_tasks(a=10.0), {"a": {1: [9.0]}}, learned_min=100.0)["passed"]


def test_tdmpc2_run_must_share_the_dataset(tmp_path):
    run = tmp_path / "off"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"dataset": "mt@aa", "agent": "tdmpc2"}))
    (run / "metrics.csv").write_text("kind,task,updates,return\neval,cup-catch,10,5.0\n"
                                     "eval,cup-catch,10,7.0\neval,mean,10,\n")
    got = bench.tdmpc2_beside(run, "mt@aa")
    assert got["eval_return"] == {"cup-catch": {"10": 6.0}}
    with pytest.raises(SystemExit, match="needs TD-MPC2 on mt@bb"):
        bench.tdmpc2_beside(run, "mt@bb")
    assert bench.tdmpc2_beside(None, "mt@aa") is None


def test_results_are_written_plotted_and_printed(tmp_path, capsys):
    import offline_check
    tasks = _tasks(**{"cartpole-balance": 800.0, "acrobot-swingup": 20.0})
    res = bench.judge(tasks, {"cartpole-balance": {1000: [300.0], 2000: [500.0]}},
                      learned_min=100.0)
    res.update({"updates_reached": 2000, "updates_planned": 20_000})
    path = offline_check.write_results(
        res, tmp_path, "check", label="offline", no_verdict="not learned", title="t",
        columns={"source": "source_final_return", "pass": "pass"}, tally="1/1 learned tasks")
    assert path == tmp_path / "check.json"
    assert json.loads(path.read_text())["tasks"]["cartpole-balance"]["ratio"] == 500.0 / 800.0
    assert (tmp_path / "check.png").stat().st_size > 0
    printed = capsys.readouterr().out
    rows = json.loads(printed[:printed.index("passed:")])
    assert rows == {"cartpole-balance": {"source": 800.0, "pass": True},
                    "acrobot-swingup": {"source": 20.0, "pass": None}}
    assert printed.endswith(f"passed: True (1/1 learned tasks); updates 2,000/20,000; "
                            f"results in {path}\n")
