"""benchmarks/learning/dreamerv3_offline.py's verdict and its TD-MPC2 pairing (no training:
the check itself takes hours and is not part of the suite)."""
import importlib.util
import json
import os
import shutil
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
    res = bench.judge(tasks, curves, learned_margin=100.0)
    per = res["tasks"]
    assert per["cartpole-balance"]["offline_final_return"] == 410.0
    assert per["cartpole-balance"]["pass"] and per["reacher-easy"]["pass"]
    assert per["acrobot-swingup"]["pass"] is None          # the source did not learn it
    assert res["passed"] and res["tasks_learned_by_source"] == res["tasks_passing"] == 2
    curves["reacher-easy"][2000] = [150.0]                  # below 0.5 x 400: fails
    res = bench.judge(tasks, curves, learned_margin=100.0)
    assert res["tasks"]["reacher-easy"]["pass"] is False and not res["passed"]
    # nothing learned by the sources: no evidence, no pass
    few = _tasks(a=10.0)
    few["a"]["random"] = {"mean": 0.0, "std": 0.0, "episodes": 16}
    assert not bench.judge(few, {"a": {1: [9.0]}}, learned_margin=100.0)["passed"]


def test_the_random_return_comes_from_the_table_and_an_unknown_task_is_refused():
    """Without the check's own measurement the committed table's random return is the
    floor; a task in neither is refused in one line naming the fix, never judged against
    a random return of 0."""
    from wmx.evaluate.random_policy import random_returns
    cart = random_returns()["cartpole-balance"]["mean"]
    res = bench.judge(_tasks(**{"cartpole-balance": cart + 99.0}),
                      {"cartpole-balance": {2000: [cart]}}, learned_margin=100.0)
    row = res["tasks"]["cartpole-balance"]
    assert row["random_policy_return"] == cart and row["source_learned"] is False
    with pytest.raises(SystemExit) as e:
        bench.judge(_tasks(**{"probe-action": 500.0}), {"probe-action": {2000: [400.0]}})
    msg = str(e.value)
    assert len(msg.splitlines()) == 1 and msg.startswith("probe-action: no uniform-random")
    assert "benchmarks/random_returns.py --tasks probe-action" in msg


def test_a_source_at_random_level_did_not_learn_its_task():
    # cartpole-balance pays ~330 for uniform random actions: a source at 299 learned
    # nothing, however far above a fixed bar of 100 it is; walker-stand's 922 did
    tasks = _tasks(**{"cartpole-balance": 299.0, "walker-stand": 922.0})
    tasks["cartpole-balance"]["random"] = {"mean": 326.7, "std": 47.4, "episodes": 16}
    tasks["walker-stand"]["random"] = {"mean": 134.8, "std": 20.6, "episodes": 16}
    curves = {"cartpole-balance": {2000: [310.0]}, "walker-stand": {2000: [133.0]}}
    res = bench.judge(tasks, curves, learned_margin=100.0)
    cart, walker = res["tasks"]["cartpole-balance"], res["tasks"]["walker-stand"]
    assert cart["random_policy_return"] == 326.7 and cart["learned_floor"] == 426.7
    assert cart["source_learned"] is False and cart["pass"] is None
    assert walker["source_learned"] is True and walker["pass"] is False
    assert res["tasks_learned_by_source"] == 1 and not res["passed"]
    curves["walker-stand"][2000] = [461.0]                 # 0.5 x 922 = 461: passes
    assert bench.judge(tasks, curves, learned_margin=100.0)["passed"]


def test_random_returns_are_measured_once_and_recorded(monkeypatch):
    import offline_check
    calls = []
    monkeypatch.setattr(offline_check, "random_policy_return",
                        lambda task, T: calls.append((task, T)) or {"mean": 1.0, "std": 0.0,
                                                                    "episodes": 16})
    tasks, bench_json = _tasks(a=5.0, b=6.0), {"random_returns": {"b": {"mean": 2.0}}}
    assert offline_check.with_random_returns(tasks, bench_json, 100) is True
    assert calls == [("a", 100)]                            # b was recorded already
    assert tasks["a"]["random"]["mean"] == 1.0 and tasks["b"]["random"] == {"mean": 2.0}
    assert offline_check.with_random_returns(_tasks(a=5.0), bench_json, 100) is False
    assert calls == [("a", 100)]
    # an mt19 task at its own T: the committed table's entry, not measured; at another
    # T: measured
    from wmx.evaluate.random_policy import random_returns
    tasks = _tasks(**{"cartpole-balance": 800.0})
    for T in (None, 500):
        bench_json = {}
        assert offline_check.with_random_returns(tasks, bench_json, T) is True
        assert bench_json["random_returns"]["cartpole-balance"] == \
            random_returns()["cartpole-balance"]
    assert calls == [("a", 100)]
    offline_check.with_random_returns(tasks, {}, 100)
    assert calls == [("a", 100), ("cartpole-balance", 100)]


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
                      learned_margin=100.0)
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


def _source_run(run: Path, task: str, final: float) -> None:
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"task": task, "episode_length": None}))
    (run / "summary.json").write_text(json.dumps({"episode_sets": {"0": "episodes/x/0"}}))
    (run / "metrics.csv").write_text(f"kind,seed,return\ntrain,0,1.0\neval,0,{final}\n")


def _prepared_run(home: Path, agent: str = "dreamerv3", seeds: tuple = (0,)) -> Path:
    """A check run as --prepare-only leaves it (no dataset needed to report), its source
    run (reacher-easy, final return 800) under ``home``."""
    from wmx.runs.offline_config import OfflineRunConfig
    from wmx.schemas.taskset import mt19
    _source_run(home / "runs" / "src", "reacher-easy", 800.0)
    run = home / "runs" / "dv3-offline-check-1"
    run.mkdir()
    rc = OfflineRunConfig(dataset="mt19-x@" + "ab" * 32,
                          taskset=mt19().subset(["reacher-easy"]).to_dict(), agent=agent,
                          updates=4000, eval_every=1000, log_every=500, checkpoint_every=1000,
                          seeds=seeds)
    (run / "config.json").write_text(json.dumps({**rc.to_json(), "code_version": "0123abc",
                                                 "device": "tpu: TPU v5 lite"}))
    (run / "benchmark.json").write_text(json.dumps({
        "sources": ["runs/src"], "learned_margin": 100.0, "tdmpc2_run": None,
        "dataset": rc.dataset, "random_returns": {"reacher-easy": {"mean": 60.0}}}))
    return run


_METRICS = ("kind,task,seed,updates,return\ntrain,,0,500,\neval,reacher-easy,0,1000,300.0\n"
            "train,,0,1500,\neval,reacher-easy,0,2000,450.0\ntrain,,0,2500,\n")


def test_a_prepared_home_moves_and_its_run_is_reported_from_metrics(tmp_path, capsys):
    # prepared on one machine (sources recorded relative to the home folder), trained on
    # another, reported from the run directory that came back without checkpoints
    import offline_check

    from wmx.runs.offline_config import OfflineRunConfig
    home = tmp_path / "first"
    assert offline_check.home_relative(home, home / "runs" / "src") == "runs/src"
    assert offline_check.home_relative(home, tmp_path / "elsewhere") == str(tmp_path / "elsewhere")
    moved = tmp_path / "second"                   # the home folder after the copy
    run = _prepared_run(moved)
    (run / "metrics.csv").write_text(_METRICS)
    out = tmp_path / "results"
    assert bench.main(["--resume", str(run), "--report-only", "--out", str(out)]) == 0
    res = json.loads((out / "dreamerv3_offline.json").read_text())
    # a run prepared before benchmark.json recorded its resume command gains it
    cmd = json.loads((run / "benchmark.json").read_text())["resume_command"]
    assert cmd == "python benchmarks/learning/dreamerv3_offline.py --resume"
    assert (Path(__file__).resolve().parents[2] / cmd.split()[1]).is_file()
    task = res["tasks"]["reacher-easy"]
    assert task["source_runs"] == ["runs/src"]             # relative to the data root
    assert task["offline_eval_return"] == {"1000": 300.0, "2000": 450.0}
    assert task["pass"] is True and res["passed"]         # 450 >= 0.5 x 800
    assert res["updates_reached"] == 2500 and res["finished"] is False
    assert res["comparison_report"] is None
    # the commit and device that trained it, from its config.json, not this process's
    assert (res["code_version"], res["device"]) == ("0123abc", "tpu: TPU v5 lite")
    rc = OfflineRunConfig.from_json(json.loads((run / "config.json").read_text()))
    older = offline_check.run_fields(rc, tmp_path, {"updates": 0, "finished": False}, 1.0)
    assert (older["code_version"], older["device"]) == (None, None)   # made before
    with pytest.raises(SystemExit):                       # nothing to report on
        bench.main(["--report-only", "--sources", str(run), "--out", str(out)])
    assert "--report-only needs --resume" in capsys.readouterr().err


def test_resume_refuses_what_it_would_spoil(tmp_path):
    run = _prepared_run(tmp_path / "home")
    out = str(tmp_path / "out")
    with pytest.raises(SystemExit, match="no metrics.csv, nothing to report"):
        bench.main(["--resume", str(run), "--report-only", "--out", out])
    (run / "metrics.csv").write_text(_METRICS)
    # evaluations recorded, checkpoints/ not brought back: training would restart at 0
    with pytest.raises(SystemExit, match="no checkpoints/.*--report-only"):
        bench.main(["--resume", str(run), "--out", out])
    (run / "checkpoints" / "000000001000").mkdir(parents=True)   # incomplete: no host.json
    with pytest.raises(SystemExit, match="no checkpoints/.*--report-only"):
        bench.main(["--resume", str(run), "--out", out])
    assert (run / "metrics.csv").read_text() == _METRICS
    other = _prepared_run(tmp_path / "other", agent="tdmpc2")
    with pytest.raises(SystemExit, match="a tdmpc2 run; resume it with .*tdmpc2_offline.py"):
        bench.main(["--resume", str(other), "--report-only", "--out", out])
    with pytest.raises(SystemExit, match="not an offline check run"):
        bench.main(["--resume", str(tmp_path / "home" / "runs" / "src"), "--out", out])
    assert not Path(out).exists()                       # nothing written for a refusal
    from wmx.runs.owner import hold_run
    shutil.rmtree(run / "checkpoints", ignore_errors=True)
    (run / "metrics.csv").unlink()
    before = {f.name: f.read_bytes() for f in run.iterdir() if f.is_file()}
    with hold_run(run):                                 # another trainer of the run
        with pytest.raises(SystemExit, match=r"pid \d+ .* trains it now"):
            bench.main(["--resume", str(run), "--out", out])
        assert {f.name: f.read_bytes() for f in run.iterdir()
                if f.is_file() and f.name != "run.lock"} == before
    assert not Path(out).exists()


def test_the_check_holds_the_run_lock_while_it_trains(tmp_path, monkeypatch):
    """`wmx runs` shows a check's run as running, and a second trainer fails at once."""
    import offline_check

    from wmx.runs.offline_config import OfflineRunConfig
    from wmx.runs.owner import probe
    from wmx.train_offline import loop
    run = _prepared_run(tmp_path / "home")
    seen = []

    def fake_run(rc, run_dir, **kw):
        seen.append(probe(run_dir))
        return {"finished": True, "updates": 0}
    monkeypatch.setattr(loop, "run", fake_run)
    rc = OfflineRunConfig.from_json(json.loads((run / "config.json").read_text()))
    summary, _ = offline_check.train(rc, run, tmp_path / "home", None)
    assert summary["finished"] and seen[0] is not None and seen[0].pid == os.getpid()
    assert probe(run) is None and not (run / "run.lock").exists()   # released, removed
    from wmx.runs.owner import hold_run
    with hold_run(run):              # a trainer that started after --resume's check
        with pytest.raises(SystemExit, match=r"pid \d+"):
            offline_check.train(rc, run, tmp_path / "home", None)
    assert len(seen) == 1


def test_a_tdmpc2_run_is_checked_before_it_is_recorded(tmp_path):
    run = _prepared_run(tmp_path / "home")
    (run / "metrics.csv").write_text(_METRICS)
    before = (run / "benchmark.json").read_text()
    td = tmp_path / "home" / "runs" / "offline-check-1"
    td.mkdir()
    (td / "config.json").write_text(json.dumps({"dataset": "mt19-x@cd", "agent": "tdmpc2"}))
    (td / "metrics.csv").write_text("kind,task,updates,return\neval,reacher-easy,1000,600.0\n")
    out = str(tmp_path / "out")
    with pytest.raises(SystemExit, match="needs TD-MPC2 on mt19-x@abab"):
        bench.main(["--resume", str(run), "--report-only", "--tdmpc2-run", str(td), "--out", out])
    with pytest.raises(SystemExit, match="no such offline run"):
        bench.main(["--resume", str(run), "--report-only", "--tdmpc2-run", str(td) + "-x",
                    "--out", out])
    assert (run / "benchmark.json").read_text() == before     # nothing recorded
    (td / "config.json").write_text(json.dumps({"dataset": "mt19-x@" + "ab" * 32,
                                                "agent": "tdmpc2"}))
    assert bench.main(["--resume", str(run), "--report-only", "--tdmpc2-run", str(td),
                       "--out", out]) == 0
    assert json.loads((run / "benchmark.json").read_text())["tdmpc2_run"] == "runs/offline-check-1"
    res = json.loads((Path(out) / "dreamerv3_offline.json").read_text())
    assert res["tdmpc2"]["eval_return"] == {"reacher-easy": {"1000": 600.0}}
    assert bench.main(["--resume", str(run), "--report-only", "--tdmpc2-run", "none",
                       "--out", out]) == 0
    assert json.loads((run / "benchmark.json").read_text())["tdmpc2_run"] is None


def test_the_standard_error_of_each_evaluation(tmp_path):
    import offline_check
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.csv").write_text(
        "kind,task,seed,updates,return,return_std,episodes\n"
        "eval,reacher-easy,0,1000,300.0,400.0,10\neval,reacher-easy,1,1000,500.0,300.0,30\n"
        "eval,mean,0,1000,,,\ntrain,,0,1500,,,\neval,reacher-easy,0,2000,450.0,0.0,10\n")
    se = offline_check.eval_stderr(run)
    # the seed mean's standard error: sqrt(400^2/10 + 300^2/30) / 2 over two seeds
    assert se["reacher-easy"][1000] == pytest.approx((400.0 ** 2 / 10 + 300.0 ** 2 / 30) ** 0.5 / 2)
    assert se["reacher-easy"][2000] == 0.0
    res = {"tasks": {"reacher-easy": {"offline_eval_return": {"1000": 400.0, "2000": 450.0}},
                     "cup-catch": {"offline_eval_return": {}}}}
    offline_check.with_stderr(res, run)
    assert res["tasks"]["reacher-easy"]["offline_final_stderr"] == 0.0
    assert set(res["tasks"]["reacher-easy"]["offline_eval_stderr"]) == {"1000", "2000"}
    assert res["tasks"]["cup-catch"] == {"offline_eval_return": {}, "offline_eval_stderr": {},
                                         "offline_final_stderr": None}


def test_pack_copies_what_training_elsewhere_needs(tmp_path, capsys):
    """--resume RUN --pack DIR: a home folder of its own (the run, its dataset, the source
    runs' small files; no episode sets), whole or absent, from which the run reports."""
    home = tmp_path / "home"
    run = _prepared_run(home)
    ds = home / "datasets" / "mt19-x" / ("ab" * 32)
    ds.mkdir(parents=True)
    (ds / "manifest.json").write_text("{}")
    (ds / "shard-00000-of-00001.array_record").write_bytes(b"\0" * 100)
    (home / "episodes" / "reacher-easy" / "set").mkdir(parents=True)
    (home / "runs" / "src" / "checkpoints").mkdir()
    out = str(tmp_path / "out")
    dest = tmp_path / "pack"
    assert bench.main(["--resume", str(run), "--pack", str(dest), "--out", out]) == 0
    assert "--resume" in capsys.readouterr().out
    files = sorted(str(f.relative_to(dest)) for f in dest.rglob("*") if f.is_file())
    assert files == [f"datasets/mt19-x/{'ab' * 32}/manifest.json",
                     f"datasets/mt19-x/{'ab' * 32}/shard-00000-of-00001.array_record",
                     "runs/dv3-offline-check-1/benchmark.json",
                     "runs/dv3-offline-check-1/config.json",
                     "runs/src/config.json", "runs/src/metrics.csv", "runs/src/summary.json"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    with pytest.raises(SystemExit, match="it exists; give a new folder"):
        bench.main(["--resume", str(run), "--pack", str(dest), "--out", out])
    packed = dest / "runs" / "dv3-offline-check-1"
    (packed / "metrics.csv").write_text(_METRICS)       # trained on the other machine
    assert bench.main(["--resume", str(packed), "--report-only", "--out", out]) == 0
    res = json.loads((Path(out) / "dreamerv3_offline.json").read_text())
    assert res["tasks"]["reacher-easy"]["source_runs"] == ["runs/src"]
    (packed / "checkpoints" / "1000").mkdir(parents=True)
    (packed / "checkpoints" / "1000" / "host.json").write_text("{}")   # a complete one
    with pytest.raises(SystemExit, match="has trained already"):
        bench.main(["--resume", str(packed), "--pack", str(tmp_path / "p2"), "--out", out])
    shutil.rmtree(ds)
    with pytest.raises(SystemExit, match="dataset mt19-x@abababab.. is not in"):
        bench.main(["--resume", str(run), "--pack", str(tmp_path / "p3"), "--out", out])
    assert not (tmp_path / "p2").exists() and not (tmp_path / "p3").exists()


def test_pack_refuses_before_anything_is_prepared_and_packs_the_tdmpc2_run(tmp_path):
    home = tmp_path / "home"
    run = _prepared_run(home)
    ds = home / "datasets" / "mt19-x" / ("ab" * 32)
    ds.mkdir(parents=True)
    (ds / "manifest.json").write_text("{}")
    out = str(tmp_path / "out")
    taken = tmp_path / "taken"
    taken.mkdir()
    runs_before = sorted(p.name for p in (home / "runs").iterdir())
    for dest, msg in [(taken, "it exists"), (home / "runs" / "p", "inside the home folder"),
                      (ds / "pack", "inside the home folder"), (taken / "x" / "y", None)]:
        if msg is None:                            # a file where a parent folder should be
            (taken / "x").write_text("")
            msg = "is not a folder"
        with pytest.raises(SystemExit, match=msg):   # a new run: refused before the build
            bench.main(["--home", str(home), "--sources", str(home / "runs" / "src"),
                        "--prepare-only", "--pack", str(dest), "--out", out])
        with pytest.raises(SystemExit, match=msg):
            bench.main(["--resume", str(run), "--pack", str(dest), "--out", out])
    assert sorted(p.name for p in (home / "runs").iterdir()) == runs_before
    # the TD-MPC2 run beside, recorded in benchmark.json: its files and report/ travel
    b = json.loads((run / "benchmark.json").read_text())
    (run / "benchmark.json").write_text(json.dumps({**b, "tdmpc2_run": "runs/td"}))
    with pytest.raises(SystemExit, match=r"the runs \['runs/td'\] recorded in .* are not in"):
        bench.main(["--resume", str(run), "--pack", str(tmp_path / "p1"), "--out", out])
    (home / "runs" / "td" / "report").mkdir(parents=True)
    (home / "runs" / "td" / "config.json").write_text("{}")
    (home / "runs" / "td" / "report" / "report.md").write_text("# report\n")
    (home / "runs" / "td" / "model.ckpt").write_text("not packed")
    assert bench.main(["--resume", str(run), "--pack", str(tmp_path / "p2"), "--out", out]) == 0
    p2 = tmp_path / "p2"
    assert sorted(f.name for f in (p2 / "runs" / "td").rglob("*") if f.is_file()) == [
        "config.json", "report.md"]
    umask = os.umask(0)
    os.umask(umask)
    assert p2.stat().st_mode & 0o777 == 0o777 & ~umask
    assert not (tmp_path / "p1").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_resume_with_more_updates_extends_an_unfinished_run(tmp_path, monkeypatch, capsys):
    """--resume RUN --updates N: a larger N extends the run (config.json rewritten under the
    run's lock, the trainer given N); a smaller one, another typed run flag that differs
    from the run's, --sources or a finished run are refused before anything is written
    (never silently ignored), and --report-only takes no --updates."""
    from wmx.runs.owner import probe
    from wmx.train_offline import loop
    run = _prepared_run(tmp_path / "home")
    (run / "metrics.csv").write_text(_METRICS)
    (run / "checkpoints" / "000000002000").mkdir(parents=True)
    (run / "checkpoints" / "000000002000" / "host.json").write_text("{}")
    out = str(tmp_path / "out")
    before = {f.name: f.read_bytes() for f in run.iterdir() if f.is_file()}
    for flags, msg in [(["--updates", "3000"], "--updates 3000 conflicts with the run's "
                        "saved updates 4000; --updates may only grow"),
                       (["--preset", "paper"], "--preset paper conflicts with the run's saved "
                        "preset cpu"),
                       (["--learned-margin", "50"], "--learned-margin 50.0 conflicts"),
                       (["--sources", str(run)], "--sources does not apply to a resumed run")]:
        with pytest.raises(SystemExit, match=msg):
            bench.main(["--resume", str(run), "--out", out, *flags])
    with pytest.raises(SystemExit):
        bench.main(["--resume", str(run), "--report-only", "--updates", "6000", "--out", out])
    assert "--updates with --report-only" in capsys.readouterr().err
    assert {f.name: f.read_bytes() for f in run.iterdir() if f.is_file()} == before
    seen = []

    def fake_run(rc, run_dir, **kw):
        seen.append((rc.updates, json.loads((run_dir / "config.json").read_text())["updates"],
                     probe(run_dir) is not None))
        return {"finished": False, "updates": 2500, "wall_s": 1.0}
    monkeypatch.setattr(loop, "run", fake_run)
    assert bench.main(["--resume", str(run), "--updates", "6000", "--out", out]) == 0
    assert seen == [(6000, 6000, True)]
    res = json.loads((Path(out) / "dreamerv3_offline.json").read_text())
    assert res["updates_planned"] == 6000
    assert bench.main(["--resume", str(run), "--updates", "6000", "--out", out]) == 0
    assert bench.main(["--resume", str(run), "--out", out, "--preset", "cpu", "--eval-every",
                       "1000", "--learned-margin", "100"]) == 0   # equal flags pass
    assert [s[0] for s in seen] == [6000, 6000, 6000]
    (run / "summary.json").write_text(json.dumps({"finished": True, "updates": 6000}))
    with pytest.raises(SystemExit, match="has finished its 6,000 updates"):
        bench.main(["--resume", str(run), "--updates", "8000", "--out", out])
    assert json.loads((run / "config.json").read_text())["updates"] == 6000


def test_resume_flag_edge_cases(tmp_path, capsys):
    """A run whose newest checkpoint says finished (killed before summary.json) is not
    extended; --pack takes no --updates; the flags that created a run pass again as typed
    (--log-every saved as its gcd with --eval-every); a judging setting an older
    benchmark.json lacks is the flag's default; a --home other than the run's is refused;
    a damaged config.json is one line; a refused --pack writes nothing."""
    run = _prepared_run(tmp_path / "home")
    out = str(tmp_path / "out")
    cfg = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**cfg, "log_every": 500, "eval_every": 1000}))
    b = json.loads((run / "benchmark.json").read_text())
    del b["learned_margin"]                                 # written before it was recorded
    (run / "benchmark.json").write_text(json.dumps(b))
    (run / "metrics.csv").write_text(_METRICS)
    ck = run / "checkpoints" / "000000004000"
    ck.mkdir(parents=True)
    (ck / "host.json").write_text(json.dumps({"updates": 4000, "finished": True}))
    with pytest.raises(SystemExit, match="has finished its 4,000 updates"):
        bench.main(["--resume", str(run), "--updates", "6000", "--out", out])
    with pytest.raises(SystemExit):
        bench.main(["--resume", str(run), "--updates", "6000", "--pack", str(tmp_path / "p"),
                    "--out", out])
    assert "--updates with --pack" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="--home .* is not the run's home folder"):
        bench.main(["--resume", str(run), "--home", str(tmp_path), "--out", out,
                    "--report-only"])
    before = {f.name: f.read_bytes() for f in run.iterdir() if f.is_file()}
    # trained already: refused before benchmark.json gains its resume command
    with pytest.raises(SystemExit, match="has trained already"):
        bench.main(["--resume", str(run), "--pack", str(tmp_path / "p"), "--out", out])
    assert {f.name: f.read_bytes() for f in run.iterdir() if f.is_file()} == before
    assert not (tmp_path / "p").exists()
    assert bench.main(["--resume", str(run), "--report-only", "--out", out,
                       "--eval-every", "1000", "--log-every", "1500",   # saved: gcd 500
                       "--learned-margin", "100", "--home", str(tmp_path / "home")]) == 0
    with pytest.raises(SystemExit, match="--log-every 250 conflicts"):
        bench.main(["--resume", str(run), "--report-only", "--out", out, "--log-every", "250"])
    (run / "config.json").write_text("{damaged")
    with pytest.raises(SystemExit, match=r"config.json is unreadable .*damaged"):
        bench.main(["--resume", str(run), "--report-only", "--out", out])


def _report(run: Path, step: int, episodes: int, returns: dict, **run_fields) -> None:
    """A run's report/report.json as `evaluate --run` writes it (the fields read)."""
    (run / "report").mkdir(parents=True, exist_ok=True)
    seeds = sorted({int(x) for by_seed in returns.values() for x in by_seed})
    keys = run_fields.pop("keys", "fresh")
    (run / "report" / "report.json").write_text(json.dumps({
        "schema": "wmx-evaluation-report/1",
        "run": {"checkpoint_step": step, "name": run.name, "agent": "dreamerv3",
                "seeds": seeds, **run_fields},
        "evaluation": {"episodes": episodes, "keys": keys}, "returns": returns}))


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


def test_set_gives_the_checks_model_and_is_kept_on_resume(tmp_path, capsys):
    """--set fields go into the run's config (checked before any dataset is built: a typo
    is one line naming the field); a resume must repeat them as saved or leave them out;
    the result records them."""
    home = tmp_path / "home"
    run = _prepared_run(home)
    out = str(tmp_path / "out")
    with pytest.raises(SystemExit, match="'unitz': did you mean 'units'"):
        bench.main(["--sources", str(home / "runs" / "src"), "--home", str(home),
                    "--set", "unitz=128", "--out", out])
    with pytest.raises(SystemExit, match=r"takes .*integer"):
        bench.main(["--sources", str(home / "runs" / "src"), "--home", str(home),
                    "--set", "units=wide", "--out", out])
    for item, flag in (("preset=paper", "--preset"), ("batch_size=8", "--batch-size")):
        with pytest.raises(SystemExit, match=f"--set {item.split('=')[0]}: give {flag}"):
            bench.main(["--sources", str(home / "runs" / "src"), "--home", str(home),
                        "--set", item, "--out", out])
    assert sorted(p.name for p in (home / "runs").iterdir()) == ["dv3-offline-check-1", "src"]
    assert not (home / "datasets").exists()              # refused before the build
    assert not Path(out).exists()                        # and before --out is made
    (run / "metrics.csv").write_text(_METRICS)
    with pytest.raises(SystemExit, match=r"units=128 conflicts with the run's saved "
                                         r"units=64 \(the preset's\)"):
        bench.main(["--resume", str(run), "--report-only", "--out", out, "--set", "units=128"])
    assert bench.main(["--resume", str(run), "--report-only", "--out", out,   # the preset's
                       "--set", "units=64"]) == 0
    with pytest.raises(SystemExit, match="no field 'unitz'; did you mean 'units'"):
        bench.main(["--resume", str(run), "--report-only", "--out", out, "--set", "unitz=64"])
    cfg = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**cfg, "agent_overrides": {"units": 128}}))
    assert bench.main(["--resume", str(run), "--report-only", "--out", out,
                       "--set", "units=128"]) == 0
    assert json.loads((Path(out) / "dreamerv3_offline.json").read_text())[
        "agent_overrides"] == {"units": 128}
    assert bench.main(["--resume", str(run), "--report-only", "--out", out]) == 0
    with pytest.raises(SystemExit, match="units=64 conflicts with the run's saved units=128"):
        bench.main(["--resume", str(run), "--report-only", "--out", out, "--set", "units=64"])
    with pytest.raises(SystemExit, match=r"deter=None conflicts .* deter=512 \(the preset's\)"):
        bench.main(["--resume", str(run), "--report-only", "--out", out, "--set", "deter=null"])


def test_set_is_checked_against_the_pooled_tasks_model():
    """The early check builds the config of the pooled tasks' TaskSet, as the run will (not
    a single-task config): offline TD-MPC2 is the multi-task model even on one task
    (num_tasks 1), so task_dim 0 is refused before any dataset is built."""
    import argparse

    import offline_check
    from wmx.agents.registry import get_agent
    from wmx.envs.registry import get_task
    args = argparse.Namespace(preset="cpu", set_=["task_dim=0"], seeds=[0], updates=None,
                              batch_size=256, eval_every=1000, log_every=500, eval_episodes=2)
    get_agent("tdmpc2").make_config("cpu", {"task_dim": 0}, task=get_task("cartpole-balance"))
    for tasks in (["cartpole-balance"], ["cartpole-balance", "reacher-easy"]):
        with pytest.raises(SystemExit, match="task_dim=0: multi-task"):
            offline_check.check_overrides("tdmpc2", args, tasks, None)
    args.set_ = ["task_dim=32"]
    offline_check.check_overrides("tdmpc2", args, ["cartpole-balance", "reacher-easy"], None)


def test_the_offline_terms_pass_through_set_into_the_result(tmp_path):
    """The offline terms (W-D10, W-D11) are --set fields like any other: a bad value is
    refused in one line before anything is built, a run made with them records them in
    the result's agent_overrides beside the verdict, and a resume must keep them."""
    home = tmp_path / "home"
    run = _prepared_run(home)
    out = str(tmp_path / "out")
    with pytest.raises(SystemExit) as info:
        bench.main(["--sources", str(home / "runs" / "src"), "--home", str(home),
                    "--set", "offline_bc_weight=-0.5", "--out", out])
    msg = str(info.value)
    assert len(msg.splitlines()) == 1 and "offline_bc_weight=-0.5: must be >= 0" in msg
    with pytest.raises(SystemExit, match="offline_penalty_weight=1.0 needs .*offline_ensemble"):
        bench.main(["--sources", str(home / "runs" / "src"), "--home", str(home),
                    "--set", "offline_penalty_weight=1.0", "--out", out])
    assert not (home / "datasets").exists() and not Path(out).exists()
    terms = {"offline_bc_weight": 0.3, "offline_ensemble": 5, "offline_penalty_weight": 1.0}
    cfg = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**cfg, "agent_overrides": terms}))
    (run / "metrics.csv").write_text(_METRICS)
    sets = [a for k, v in terms.items() for a in ("--set", f"{k}={v}")]
    assert bench.main(["--resume", str(run), "--report-only", "--out", out, *sets]) == 0
    res = json.loads((Path(out) / "dreamerv3_offline.json").read_text())
    assert res["agent_overrides"] == terms and res["passed"] is True
    with pytest.raises(SystemExit, match=r"offline_bc_weight=0.5 conflicts with the run's "
                                         r"saved offline_bc_weight=0.3"):
        bench.main(["--resume", str(run), "--report-only", "--out", out,
                    "--set", "offline_bc_weight=0.5"])
