"""`wmx runs ls|info` on a home with a finished, an interrupted and a running run; the run
lock (`wmx.runs.owner`): honest "running", a second trainer refused."""
from __future__ import annotations

import dataclasses
import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tiny_runs import TINY_RC
from wmx.cli.main import main as wmx_main
from wmx.runs import listing
from wmx.runs.owner import LOCK_NAME, RunBusyError, hold_run, probe
from wmx.sizes import human_size


@pytest.fixture(scope="module")
def runs_home(tiny_online_run, tmp_path_factory):
    """A home with the finished tiny run ("done") and the same run stopped after 2 of its
    6 chunks ("cut": a real interrupted run, as a kill between chunks leaves it)."""
    from wmx.train_online.loop import run
    _, _, finished, _ = tiny_online_run
    home = tmp_path_factory.mktemp("runs-home")
    (home / "runs").mkdir()
    shutil.copytree(finished, home / "runs" / "done")
    cut = home / "runs" / "cut"
    cut.mkdir()
    (cut / "config.json").write_text(json.dumps(TINY_RC.to_json()))
    summary = run(TINY_RC, cut, None, progress=False, stop_after_chunks=2)
    assert not summary["finished"]
    (home / "runs" / ".tmp-x~h~1~deadbeef").mkdir()      # a temporary: never listed
    return home


def _ls(home, capsys) -> dict[str, list[str]]:
    assert wmx_main(["runs", "ls", "--home", str(home)]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = re.split(r"\s{2,}", lines[0])
    assert head == ["NAME", "AGENT", "TASK/DATASET", "STATUS", "PROGRESS", "LAST EVAL", "SIZE"]
    return {ln.split()[0]: re.split(r"\s{2,}", ln) for ln in lines[1:]}


def test_an_interrupted_runs_total_is_its_rounded_total(runs_home, tmp_path, capsys):
    """--env-steps rounds up to whole rounds: an interrupted run shows the total it will
    reach (config.json's derived total), not the typed --env-steps."""
    (tmp_path / "runs").mkdir()
    cut = shutil.copytree(runs_home / "runs" / "cut", tmp_path / "runs" / "cut")
    cfg = json.loads((cut / "config.json").read_text())
    assert cfg["derived"]["total_env_steps"] == 120
    (cut / "config.json").write_text(json.dumps({**cfg, "env_steps": 100}))
    assert _ls(tmp_path, capsys)["cut"][4] == "40/120 env steps"
    del cfg["derived"]                                   # a config without it: the typed one
    (cut / "config.json").write_text(json.dumps({**cfg, "env_steps": 100}))
    assert _ls(tmp_path, capsys)["cut"][4] == "40/100 env steps"


def test_ls_finished_and_interrupted(runs_home, capsys):
    rows = _ls(runs_home, capsys)
    assert set(rows) == {"cut", "done"}
    done, cut = rows["done"], rows["cut"]
    assert done[1:4] == ["tdmpc2", "probe-action", "finished"]
    assert cut[1:4] == ["tdmpc2", "probe-action", "interrupted"]
    # probe-action: action repeat 1, T=20, one env: 2 chunks = 40 env steps of the 120
    assert cut[4] == "40/120 env steps" and done[4] == "120/120 env steps"
    m = listing.read_metrics(runs_home / "runs" / "done" / "metrics.csv")
    last = [float(r["return"]) for r in m if r["kind"] == "eval" and r["env_steps"] == "120"]
    # the trainer's evaluation, with its seeds and eval_mode episodes per seed
    assert done[5] == f"return {sum(last) / len(last):.3g} @ 120 (trainer, 2 seeds x 2 ep)"
    assert re.fullmatch(r"return \S+ @ 40 \(trainer, 2 seeds x 2 ep\)", cut[5])   # every 40
    size = listing.disk_size(runs_home / "runs" / "done")
    assert size > 10_000 and done[6] == human_size(size)


def test_running_is_the_live_lock(runs_home, capsys):
    """A process holding the lock makes the run "running"; killed (-9), it is
    "interrupted" again without any cleanup."""
    cut = runs_home / "runs" / "cut"
    code = ("import sys, time; from wmx.runs.owner import hold_run\n"
            "with hold_run(sys.argv[1]):\n    print('held', flush=True); time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(cut)], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        assert _ls(runs_home, capsys)["cut"][3] == "running"
        owner = probe(cut)
        assert owner is not None and owner.pid == proc.pid
        with pytest.raises(RunBusyError, match=f"pid {proc.pid}"):
            with hold_run(cut):
                pass
        assert wmx_main(["runs", "info", "cut", "--home", str(runs_home)]) == 0
        assert f"status running (pid {proc.pid}" in capsys.readouterr().out
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert (cut / LOCK_NAME).exists()                  # left behind, but no longer held
    assert probe(cut) is None
    assert _ls(runs_home, capsys)["cut"][3] == "interrupted"


def test_second_trainer_is_refused(runs_home, capsys):
    """train_online --resume of a run another process trains: exit 2, one line naming it,
    before anything is read or written."""
    from wmx.train_online.cli import main as online_main
    cut = runs_home / "runs" / "cut"
    before = (cut / "metrics.csv").read_text()
    t0 = time.monotonic()
    with hold_run(cut) as me:
        assert online_main(["--resume", str(cut), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"being trained by pid {me.pid}" in err[0], err
    assert time.monotonic() - t0 < 30
    assert (cut / "metrics.csv").read_text() == before
    assert probe(cut) is None and not (cut / LOCK_NAME).exists()     # removed on release


def test_info(runs_home, capsys):
    assert wmx_main(["runs", "info", "done", "--home", str(runs_home)]) == 0
    out = capsys.readouterr().out
    assert "online run, agent tdmpc2, status finished" in out
    assert "episode set (seed 0): " in out and "episode set (seed 3): " in out
    assert 'task: "probe-action"' in out and "seeds: [0, 3]" in out
    assert "checkpoints (2):" in out and "finished" in out
    assert "train seed 0: agent_steps=120" in out and "eval seed 3: agent_steps=120" in out
    cut = runs_home / "runs" / "cut"
    assert wmx_main(["runs", "info", str(cut), "--home", str(runs_home)]) == 0
    out = capsys.readouterr().out
    assert f"status interrupted (continue with: train_online --resume {cut})" in out
    assert "progress: 40/120 env steps" in out


def test_bad_input(runs_home, tmp_path, capsys):
    assert wmx_main(["runs", "info", "nope", "--home", str(runs_home)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no run 'nope'" in err[0] and "wmx runs ls" in err[0]
    (runs_home / "runs" / "empty").mkdir()        # listed by ls: info says what is wrong
    assert wmx_main(["runs", "info", "empty", "--home", str(runs_home)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is listed by `wmx runs ls`, but its config.json is missing" \
        in err[0] and "remove the folder" in err[0]
    (runs_home / "runs" / "empty").rmdir()
    assert wmx_main(["runs", "ls", "--home", str(tmp_path)]) == 0
    assert capsys.readouterr().out == (f"no runs in {tmp_path / 'runs'} (--home {tmp_path}; "
                                       "another with --home DIR or WMX_HOME=DIR); start one "
                                       "with train_online or train_offline\n")
    bad = tmp_path / "runs" / "broken"
    bad.mkdir(parents=True)
    (bad / "config.json").write_text("{not json")
    rows = _ls(tmp_path, capsys)
    assert rows["broken"][1:4] == ["?", "?", "interrupted"]


def test_progress_of_a_checkpoint_inside_a_round(tmp_path, capsys):
    """A run with --chunk-ticks checkpointed 9 ticks into its second round and no
    metrics row for that round: the progress counts those ticks (T=20, 1 env, repeat 1)."""
    run_dir = tmp_path / "runs" / "parts"
    (run_dir / "checkpoints" / "000000000030").mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps(TINY_RC.to_json()))
    (run_dir / "checkpoints" / "000000000030" / "host.json").write_text(
        json.dumps({"next_tick": 30}))
    assert listing.read_run(run_dir).done == 20 + 9
    assert _ls(tmp_path, capsys)["parts"][4] == "29/120 env steps"


def test_ls_shows_an_offline_runs_dataset_by_its_short_hash(tmp_path, capsys):
    """ls prints ``name@<10 hex>`` (what `wmx dataset ls` prints and every command
    resolves); info keeps the full hash."""
    full = "3fa2c1d07e" + "5b" * 27
    run = tmp_path / "runs" / "off"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps(
        {"agent": "dreamerv3", "dataset": f"mt19-64ba205d@{full}", "updates": 500}))
    row = _ls(tmp_path, capsys)["off"]
    assert row[1:5] == ["dreamerv3", "mt19-64ba205d@3fa2c1d07e", "not started",
                        "0/500 updates"]
    assert wmx_main(["runs", "info", "off", "--home", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"dataset: mt19-64ba205d@{full}" in out
    assert f"status not started (continue with: train_offline --resume {run})" in out
    info = listing.read_run(run)
    for target in ("walker-walk", "mt19@latest", "x@3fa2c1d0"):   # left as they are
        assert listing.target_text(dataclasses.replace(info, target=target)) == target


def test_not_started_and_a_learning_checks_own_resume(tmp_path, capsys):
    """A run with neither a checkpoint nor a metrics row is "not started"; one metrics row
    makes it "interrupted". A learning check's run (benchmark.json) is continued with the
    command its benchmark.json records, and without one `runs info` names no script."""
    run = tmp_path / "runs" / "chk"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps(
        {"agent": "tdmpc2", "dataset": "mt19@" + "ab" * 32, "updates": 500}))
    assert listing.read_run(run).status == "not started"
    (run / "benchmark.json").write_text("{}")
    assert wmx_main(["runs", "info", "chk", "--home", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert (f"(continue with: the tdmpc2 offline learning check's --resume {run})" in out
            and "benchmarks/learning" not in out)
    cmd = "python benchmarks/learning/tdmpc2_offline.py --resume"
    (run / "benchmark.json").write_text(json.dumps({"resume_command": cmd}))
    (run / "metrics.csv").write_text("kind,seed,updates,return\ntrain,0,250,\n")
    r = listing.read_run(run)
    assert r.status == "interrupted" and listing.resume_text(r) == f"{cmd} {run}"
    assert wmx_main(["runs", "info", "chk", "--home", str(tmp_path)]) == 0
    assert f"status interrupted (continue with: {cmd} {run})" in capsys.readouterr().out
    (run / "metrics.csv").write_text("kind,seed,updates,task,score\ntrain,0,250,,\n"
                                     "eval,0,250,mean,1.25\n")  # brought back without checkpoints/
    assert listing.resume_text(listing.read_run(run)) == f"{cmd} {run} --report-only"
    (run / "summary.json").write_text(json.dumps({"finished": True, "updates": 500}))
    assert listing.resume_text(listing.read_run(run)) is None


def test_a_resume_hint_quotes_the_runs_path(tmp_path):
    run = tmp_path / "runs" / "a run; rm x"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"agent": "tdmpc2", "task": "walker-walk"}))
    assert listing.resume_text(listing.read_run(run)) == \
        f"train_online --resume '{run}'"


def test_no_resume_hint_for_a_config_naming_no_agent_or_task(tmp_path, capsys):
    """A config.json of {} (or without the task) is no run --resume could read: no hint."""
    run = tmp_path / "runs" / "empty-config"
    run.mkdir(parents=True)
    for cfg in ({}, {"agent": "tdmpc2"}, {"task": "walker-walk"}):
        (run / "config.json").write_text(json.dumps(cfg))
        assert listing.resume_text(listing.read_run(run)) is None
    assert wmx_main(["runs", "info", "empty-config", "--home", str(tmp_path)]) == 0
    assert "continue with" not in capsys.readouterr().out


def test_a_resume_hint_for_a_run_brought_back_without_checkpoints(tmp_path):
    """A run with metrics rows but no checkpoint here: --resume here would start it over."""
    run = tmp_path / "runs" / "off"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps(
        {"agent": "tdmpc2", "dataset": "mt19@" + "ab" * 32, "updates": 500}))
    (run / "metrics.csv").write_text("kind,seed,updates,return\ntrain,0,250,\n")
    r = listing.read_run(run)
    assert r.status == "interrupted" and r.done == 250 and not r.checkpoints
    assert listing.resume_text(r) == (
        f"train_offline --resume {run} where its checkpoints are (none here: here it would "
        "start again from the beginning)")


def test_an_offline_runs_last_eval_says_whose_and_its_episodes(tmp_path, capsys):
    """An offline run's LAST EVAL is the mean score over tasks of the trainer's newest
    evaluation, labelled as the trainer's with its episodes per task (`evaluate` draws other
    episodes: its report says its own count); info says how to repeat it."""
    run = tmp_path / "runs" / "off"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps(
        {"agent": "tdmpc2", "dataset": "mt19-64ba205d@" + "5b" * 32, "updates": 300}))
    head = "seed,kind,updates,task,episodes,return,score\n"
    rows = [f"0,eval,{u},{t},1,{r},{r / 10}\n" for u, vals in ((150, (50, 70)), (300, (96, 170)))
            for t, r in zip(("reacher-easy", "cartpole-balance"), vals)]
    rows += ["0,eval,150,mean,2,,6.0\n", "0,eval,300,mean,2,,13.3\n"]
    (run / "metrics.csv").write_text(head + "".join(rows))
    assert _ls(tmp_path, capsys)["off"][5] == "score 13.3 @ 300 (trainer, 1 ep/task)"
    assert wmx_main(["runs", "info", "off", "--home", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "last eval: score 13.3 @ 300 (trainer, 1 ep/task)" in out
    assert f"`evaluate --run {run} --seeds-from-checkpoint --episodes 1` repeats it" in out


def test_damaged_values_in_a_runs_files_do_not_break_ls_or_info(tmp_path, capsys):
    """One run whose files read as JSON / CSV but hold damaged values (an "inf" step in
    metrics.csv, a config ``derived`` that is no object, a taskset entry that is no object,
    a host.json wall_s of null, a summary final_score that is no number): `wmx runs ls`
    still lists every run and `wmx runs info` shows it, "?" for what does not read, no
    traceback."""
    runs = tmp_path / "runs"
    off, on = runs / "off", runs / "on"
    off.mkdir(parents=True)
    on.mkdir()
    (off / "config.json").write_text(json.dumps(
        {"agent": "tdmpc2", "dataset": "mt19-64ba205d@" + "5b" * 32, "updates": 300,
         "taskset": {"name": "t", "tasks": ["reacher-easy", {"name": "cheetah-run"}]}}))
    (off / "metrics.csv").write_text("seed,kind,updates,task,score\n0,train,inf,,\n"
                                     "0,eval,1e400,mean,1.0\n0,train,4,,\n")
    ckpt = off / "checkpoints" / "000000000004"
    ckpt.mkdir(parents=True)
    (ckpt / "host.json").write_text(json.dumps({"updates": 4, "wall_s": None}))
    (off / "summary.json").write_text(json.dumps({"finished": True, "final_score": "n/a"}))
    (on / "config.json").write_text(json.dumps({"agent": "tdmpc2", "task": "walker-walk",
                                                "derived": "not an object"}))
    rows = _ls(tmp_path, capsys)
    assert rows["off"][4] == "4/300 updates" and rows["on"][4] == "0/? env steps"
    assert wmx_main(["runs", "info", "off", "--home", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "taskset: t (2 tasks: ?, cheetah-run)" in out
    assert "000000000004: updates 4, wall ? s" in out and "final score: ?" in out
    assert wmx_main(["runs", "info", "on", "--home", str(tmp_path)]) == 0
