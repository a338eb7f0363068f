"""benchmarks/learning/dreamerv3_offline.py's check run (no training): a prepared home moved
and reported, what --resume refuses or extends, the run lock, the TD-MPC2 run's checks and
the standard errors of the evaluations."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from offline_check_stand_ins import _METRICS, _prepared_run, bench

import check_run  # noqa: E402 (its folder is on sys.path once the stand-ins are imported)


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
    assert "prepared" not in res and "prepared" not in older
    with pytest.raises(SystemExit):                       # nothing to report on
        bench.main(["--report-only", "--sources", str(run), "--out", str(out)])
    assert "--report-only needs --resume" in capsys.readouterr().err


def test_a_packed_run_records_where_it_trained_beside_where_it_was_made(tmp_path, monkeypatch):
    """Prepared on a CPU, trained in two calls on a chip at a later commit: the result names
    the training calls' commits and device, and the preparation under ``prepared``."""
    import offline_check

    import wmx.version
    from wmx.runs.offline_config import OfflineRunConfig
    run = _prepared_run(tmp_path / "home")
    cfg = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**cfg, "device": "cpu: cpu"}))
    (run / "metrics.csv").write_text(_METRICS)
    monkeypatch.setattr(wmx.version, "device_label", lambda: "tpu: TPU v5 lite")
    for version, upto in (("4567def", 3000), ("89abcde", 4000)):
        monkeypatch.setattr(wmx.version, "code_version", lambda v=version: v)
        check_run.record_training_call(run, updates_from=offline_check.last_updates(run),
                                       updates_to=upto)
        (run / "metrics.csv").write_text(_METRICS + f"train,,0,{upto},\n")
    calls = json.loads((run / "benchmark.json").read_text())["training_calls"]
    assert [(c["updates_from"], c["updates_to"]) for c in calls] == [(2500, 3000), (3000, 4000)]
    rc = OfflineRunConfig.from_json(cfg)
    res = offline_check.run_fields(rc, run, {"updates": 4000, "finished": True}, 1.0)
    assert (res["code_version"], res["device"]) == ("4567def+89abcde", "tpu: TPU v5 lite")
    assert res["prepared"] == {"code_version": "0123abc", "device": "cpu: cpu"}


def test_a_call_that_trained_nothing_does_not_name_where_it_ran(tmp_path, monkeypatch):
    """The finished run resumed on a CPU at a later commit (to re-judge it) trains nothing:
    its call is recorded, but the result names the commit and device that trained."""
    import offline_check

    import wmx.version
    run = _prepared_run(tmp_path / "home")          # made at 0123abc on "tpu: TPU v5 lite"
    monkeypatch.setattr(wmx.version, "code_version", lambda: "0123abc")
    monkeypatch.setattr(wmx.version, "device_label", lambda: "tpu: TPU v5 lite")
    check_run.record_training_call(run, updates_from=0, updates_to=4000)
    monkeypatch.setattr(wmx.version, "code_version", lambda: "fedcba9")
    monkeypatch.setattr(wmx.version, "device_label", lambda: "cpu: cpu")
    check_run.record_training_call(run, updates_from=4000, updates_to=4000)
    assert len(json.loads((run / "benchmark.json").read_text())["training_calls"]) == 2
    assert offline_check.trained_where(run) == ("0123abc", "tpu: TPU v5 lite", None)


def test_a_run_made_where_it_first_trained_names_no_preparation(tmp_path, monkeypatch):
    """Made and first trained at one commit on one device, resumed there at a later commit:
    the result names both commits and no ``prepared`` (the run was not made elsewhere)."""
    import offline_check

    import wmx.version
    run = _prepared_run(tmp_path / "home")          # made at 0123abc on "tpu: TPU v5 lite"
    monkeypatch.setattr(wmx.version, "device_label", lambda: "tpu: TPU v5 lite")
    for version, start, upto in (("0123abc", 0, 2500), ("89abcde", 2500, 4000)):
        monkeypatch.setattr(wmx.version, "code_version", lambda v=version: v)
        check_run.record_training_call(run, updates_from=start, updates_to=upto)
    assert offline_check.trained_where(run) == ("0123abc+89abcde", "tpu: TPU v5 lite", None)


def test_a_call_stopped_by_an_error_is_recorded_and_the_error_kept(tmp_path, monkeypatch):
    """A block left by an exception (a NaN stop, a crash) is recorded to its last logged
    row, its checkpointed chunks being kept; an error while recording does not replace the
    block's own exception; a block that ends normally records what it put under "to"."""
    import wmx.version
    run = _prepared_run(tmp_path / "home")
    (run / "metrics.csv").write_text(_METRICS)            # logged to 2,500 updates
    monkeypatch.setattr(wmx.version, "code_version", lambda: "0123abc")
    with pytest.raises(FloatingPointError, match="NaN"):
        with check_run.training_call(run, "updates"):
            (run / "metrics.csv").write_text(_METRICS + "train,,0,3000,\ntrain,,0,35")
            raise FloatingPointError("NaN in the loss")
    calls = json.loads((run / "benchmark.json").read_text())["training_calls"]
    assert [(c["updates_from"], c["updates_to"]) for c in calls] == [(2500, 3000)]
    with check_run.training_call(run, "updates") as span:
        span["to"] = 4000
    (run / "benchmark.json").write_text("{damaged")
    with pytest.raises(FloatingPointError):
        with check_run.training_call(run, "updates"):
            raise FloatingPointError("NaN in the loss")
    with pytest.raises(SystemExit, match="benchmark.json is unreadable"):
        with check_run.training_call(run, "updates"):
            pass
    (run / "benchmark.json").write_text(json.dumps({"training_calls": calls}))
    with check_run.training_call(run, "updates") as span:
        span["to"] = 4000
    calls = json.loads((run / "benchmark.json").read_text())["training_calls"]
    assert [(c["updates_from"], c["updates_to"]) for c in calls] == [(2500, 3000),
                                                                       (3000, 4000)]


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


def test_a_row_a_killed_process_left_incomplete_does_not_stop_a_resume(tmp_path,
                                                                     monkeypatch):
    """metrics.csv ending in a row a killed trainer left incomplete (the trainer drops it,
    `wmx.metrics_csv.kept_rows`): the check resumes, its call starting at the last whole
    row."""
    import offline_check

    from wmx.runs.offline_config import OfflineRunConfig
    from wmx.train_offline import loop
    run = _prepared_run(tmp_path / "home")
    (run / "metrics.csv").write_text(_METRICS + "train,,0")     # killed writing a row
    assert offline_check.last_updates(run) == 2500
    monkeypatch.setattr(loop, "run", lambda rc, run_dir, **kw: {"finished": False,
                                                                "updates": 3000})
    rc = OfflineRunConfig.from_json(json.loads((run / "config.json").read_text()))
    offline_check.train(rc, run, tmp_path / "home", None)
    call, = json.loads((run / "benchmark.json").read_text())["training_calls"]
    assert (call["updates_from"], call["updates_to"]) == (2500, 3000)


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
