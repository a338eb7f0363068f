"""benchmarks/learning/dreamerv3_offline.py's final evaluation (no training; ``evaluate``
stood in): it decides the verdict, only the run's own is reused, and without one
evaluation of both runs there is no comparison."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from offline_check_stand_ins import _METRICS, _prepared_run, _tasks, bench


def _report(run: Path, step: int, episodes: int, returns: dict, **run_fields) -> None:
    """A run's report/report.json as `evaluate --run` writes it (the fields read, and the
    per_task rows and aggregates every report holds: `wmx.evaluate.report.load_report`)."""
    (run / "report").mkdir(parents=True, exist_ok=True)
    seeds = sorted({int(x) for by_seed in returns.values() for x in by_seed})
    keys = run_fields.pop("keys", "fresh")
    (run / "report" / "report.json").write_text(json.dumps({
        "schema": "wmx-evaluation-report/1",
        "run": {"checkpoint_step": step, "name": run.name, "agent": "dreamerv3",
                "seeds": seeds, **run_fields},
        "evaluation": {"episodes": episodes, "keys": keys}, "returns": returns,
        "per_task": [{"task": t} for t in returns], "aggregates": []}))


def _finished(run: Path, step: int) -> None:
    ck = run / "checkpoints" / f"{step:012d}"
    ck.mkdir(parents=True)
    (ck / "host.json").write_text("{}")


def _fake_evaluate(monkeypatch, calls: list, value: float = 5.0):
    """evaluate_to_report replaced: records its calls, writes a report of every task/seed."""
    import wmx.evaluate.cli as evaluate_cli

    def fake(run_dir, *, episodes, out, home, force):
        calls.append((Path(run_dir), episodes, Path(out), force))
        _report(Path(run_dir), 4000, episodes, {"reacher-easy": {"0": [value] * episodes}})
        return Path(out) / "report.md"
    monkeypatch.setattr(evaluate_cli, "evaluate_to_report", fake)


def test_the_final_evaluation_decides_not_the_last_periodic_one(tmp_path, capsys):
    """The verdict judges the final evaluation (mean over seeds and episodes; its standard
    error from each seed's sample std, a literal calculation below); the last periodic
    point is kept beside it; the plot marks it."""
    import offline_check
    tasks = _tasks(**{"reacher-easy": 800.0})
    curves = {"reacher-easy": {1000: [100.0], 2000: [516.0]}}      # a lucky last draw
    assert bench.judge(tasks, curves, learned_margin=100.0)["passed"]
    run = _prepared_run(tmp_path / "home", seeds=(0, 1))
    eps = {"0": [0.0, 900.0, 0.0, 300.0], "1": [600.0, 600.0, 0.0, 0.0]}
    _report(run, 2000, 4, {"reacher-easy": eps})
    finals, note = offline_check.final_evaluation(run, tmp_path, 4, 2000)
    assert note.startswith("reused") and finals["reacher-easy"]["return"] == 300.0

    def sample_var(x):
        m = sum(x) / len(x)
        return sum((v - m) ** 2 for v in x) / (len(x) - 1)
    se = (sample_var(eps["0"]) / 4 + sample_var(eps["1"]) / 4) ** 0.5 / 2
    assert finals["reacher-easy"]["stderr"] == pytest.approx(se)
    res = bench.judge(tasks, curves, learned_margin=100.0, finals=finals)
    t = res["tasks"]["reacher-easy"]
    assert t["offline_final_return"] == 300.0 and t["offline_last_eval_return"] == 516.0
    assert t["ratio"] == 300.0 / 800.0 and t["pass"] is False and not res["passed"]
    offline_check.with_stderr(res, run)                 # no metrics.csv: the final's s.e.
    assert t["offline_final_stderr"] == finals["reacher-easy"]["stderr"]
    res.update({"updates_reached": 2000, "updates_planned": 2000})
    offline_check.write_results(res, tmp_path, "check", label="offline", no_verdict="-",
                                title="t", columns={"pass": "pass"}, tally="0/1")
    assert (tmp_path / "check.png").stat().st_size > 0
    assert json.loads((tmp_path / "check.json").read_text())["tasks"]["reacher-easy"][
        "offline_final_evaluation"]["episodes"] == 4
    _report(run, 2000, 1, {"reacher-easy": {"0": [3.0], "1": [5.0]}})
    one, _ = offline_check.final_evaluation(run, tmp_path, 1, 2000)
    assert one["reacher-easy"]["return"] == 4.0 and one["reacher-easy"]["stderr"] is None


def test_only_the_runs_own_final_evaluation_is_reused(tmp_path, monkeypatch):
    """report/ is reused only when it is this run's evaluation of every task and seed, of
    the asked checkpoint, count and fresh keys; otherwise the checkpoint is evaluated (when
    there and no process trains the run), or the last periodic evaluation is judged."""
    import offline_check

    from wmx.runs.owner import hold_run
    run = _prepared_run(tmp_path / "home")                 # reacher-easy, seed 0
    calls = []
    _fake_evaluate(monkeypatch, calls)
    ok = {"reacher-easy": {"0": [1.0] * 50}}
    stale = [({"returns": ok, "step": 2000}, "checkpoint 2000"),
             ({"returns": ok, "keys": "checkpoint"}, "checkpoint rollout keys"),
             ({"returns": ok, "name": "other-run"}, "run other-run"),
             ({"returns": {"cup-catch": {"0": [1.0] * 50}}}, "tasks ['cup-catch']"),
             ({"returns": {"reacher-easy": {"0": [1.0] * 50, "1": [1.0] * 50}}},
              "seeds [0, 1]"),
             ({"returns": ok, "episodes": 10}, "10 episodes")]
    for kw, why in stale:
        kw = dict(kw)
        step, episodes = kw.pop("step", 4000), kw.pop("episodes", 50)
        _report(run, step, episodes, kw.pop("returns"), **kw)
        got, note = offline_check.final_evaluation(run, tmp_path, 50, 4000)
        assert got is None and "no checkpoint at update 4,000" in note and why in note, note
    (run / "report" / "report.json").write_text("{damaged")
    got, note = offline_check.final_evaluation(run, tmp_path, 50, 4000)
    assert got is None and "unreadable" in note
    assert calls == []
    _report(run, 4000, 50, ok)
    assert offline_check.final_evaluation(run, tmp_path, 0, 4000)[0] is None   # 0: periodic
    assert offline_check.final_evaluation(run, tmp_path, 50, 4000)[0]["reacher-easy"][
        "return"] == 1.0 and calls == []                                        # reused
    _finished(run, 4000)
    assert offline_check.final_evaluation(run, tmp_path, 0, 4000)[0] is None and calls == []
    with hold_run(run):                                   # a trainer of it: not evaluated
        got, note = offline_check.final_evaluation(run, tmp_path, 20, 4000)
    assert got is None and "trains" in note and calls == []
    got, note = offline_check.final_evaluation(run, tmp_path, 20, 4000)
    assert calls == [(run, 20, run / "report", True)] and note.startswith("evaluated")
    assert got["reacher-easy"]["return"] == 5.0 and got["reacher-easy"]["episodes"] == 20
    # judged_final: the recorded count, the planned update; finished by reaching it
    assert offline_check.judged_final(run, tmp_path, {"final_episodes": 20},
                                      {"finished": False, "updates": 3500}, 4000)[0] is None
    assert offline_check.judged_final(run, tmp_path, {"final_episodes": 20},
                                      {"finished": False, "updates": 4000}, 4000)[0] == got
    assert len(calls) == 1                                            # reused
    offline_check.judged_final(run, tmp_path, {}, {"finished": True, "updates": 4000}, 4000)
    assert calls[-1][1] == offline_check.FINAL_EPISODES == 50


def test_a_finished_run_is_judged_by_its_final_evaluation(tmp_path, capsys):
    """--report-only on a run brought back finished (summary.json, report/, no checkpoints):
    the verdict is the report's; --final-episodes re-judges and is recorded (a count the
    report is not: the last periodic evaluation, said so); a negative count is refused."""
    run = _prepared_run(tmp_path / "home")
    (run / "metrics.csv").write_text(_METRICS + "eval,reacher-easy,0,4000,500.0\n")
    (run / "summary.json").write_text(json.dumps({"finished": True, "updates": 4000}))
    _report(run, 4000, 50, {"reacher-easy": {"0": [300.0] * 25 + [0.0] * 25}})
    out = tmp_path / "out"
    assert bench.main(["--resume", str(run), "--report-only", "--out", str(out)]) == 0
    res = json.loads((out / "dreamerv3_offline.json").read_text())
    t = res["tasks"]["reacher-easy"]
    assert t["offline_final_return"] == 150.0 and t["offline_last_eval_return"] == 500.0
    assert t["pass"] is False and not res["passed"] and res["final_episodes"] == 50
    assert res["final_evaluation_note"].startswith("reused")
    assert bench.main(["--resume", str(run), "--report-only", "--out", str(out),
                       "--final-episodes", "0"]) == 0
    res = json.loads((out / "dreamerv3_offline.json").read_text())
    assert res["passed"] and res["final_episodes"] == 0            # 500 >= 0.5 x 800
    assert json.loads((run / "benchmark.json").read_text())["final_episodes"] == 0
    assert bench.main(["--resume", str(run), "--report-only", "--out", str(out),
                       "--final-episodes", "30"]) == 0
    res = json.loads((out / "dreamerv3_offline.json").read_text())
    assert "50 episodes, not the 30 asked" in res["final_evaluation_note"] and res["passed"]
    capsys.readouterr()
    with pytest.raises(SystemExit):
        bench.main(["--resume", str(run), "--report-only", "--out", str(out),
                    "--final-episodes", "-5"])
    assert "--final-episodes must be >= 0" in capsys.readouterr().err


def test_no_comparison_without_one_evaluation_of_both_runs(tmp_path, monkeypatch, capsys):
    """compare_report: a run without checkpoints whose report/ is another evaluation (a
    packed TD-MPC2 run) gives no comparison and says why; evaluate is not called."""
    import wmx.evaluate.cli as evaluate_cli
    monkeypatch.setattr(evaluate_cli, "main", lambda argv: pytest.fail("evaluate called"))
    run = _prepared_run(tmp_path / "home")
    _report(run, 4000, 2, {"reacher-easy": {"0": [1.0, 2.0]}})
    assert bench.compare_report(tmp_path / "home", [str(run)], tmp_path / "cmp", 50) is None
    assert "no 50-episode evaluation" in capsys.readouterr().out
