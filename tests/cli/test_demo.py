"""`wmx demo`: stage planning, commands, order, skipping and resuming.

The heavy stages are stubbed: each stub records its argv and writes what the
real program leaves in the store (a finished run's summary.json with its
episode sets, a dataset manifest, a report), so the demo's own logic runs
unchanged. The real end-to-end demo is the slow test in test_demo_slow.py.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
from pathlib import Path

import pytest

from wmx.cli import demo, main as wmx_main

TASKS = ("cartpole-balance", "pendulum-swingup", "reacher-easy")


def opts(**kw):
    p = argparse.ArgumentParser()
    demo.add_arguments(p)
    ns = p.parse_args([])
    for k, v in kw.items():
        setattr(ns, k, v)
    return ns


def _h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _arg(argv, flag):
    return argv[argv.index(flag) + 1]


def _seeds(argv):
    if "--seeds" not in argv:
        return ["0"]
    rest = argv[argv.index("--seeds") + 1:]
    return [a for a in rest[:next((i for i, a in enumerate(rest) if a.startswith("--")),
                                  len(rest))]]


class Stubs:
    """Stub programs writing the store entries the real ones write."""

    def __init__(self, home: Path, fail: str | None = None, fail_status: int = 3):
        self.home, self.fail, self.calls = home, fail, []
        self.fail_status = fail_status

    def runners(self):
        return {p: (lambda argv, p=p: self.call(p, argv))
                for p in ("train_online", "beam", "train_offline", "evaluate")}

    def call(self, prog, argv):
        self.calls.append((prog, list(argv)))
        if prog == self.fail:
            return self.fail_status
        getattr(self, prog)(argv)
        return 0

    def train_online(self, argv):
        run_dir = (Path(_arg(argv, "--resume")) if "--resume" in argv
                   else self.home / "runs" / _arg(argv, "--name"))
        run_dir.mkdir(parents=True, exist_ok=True)
        task = json.loads((run_dir / "config.json").read_text())["task"] \
            if "--resume" in argv else _arg(argv, "--task")
        (run_dir / "config.json").write_text(json.dumps({"task": task}))
        sets = {}
        for seed in _seeds(argv):
            ch = _h(f"{run_dir.name}/{seed}")
            d = self.home / "episodes" / task / ch[:16]
            d.mkdir(parents=True, exist_ok=True)
            (d / "manifest.json").write_text(json.dumps({"content_hash": ch,
                                                         "episode_digests": [_h(ch)]}))
            sets[seed] = str(d)
        (run_dir / "summary.json").write_text(json.dumps({"episode_sets": sets}))

    def beam(self, argv):
        name = demo.dataset_stage(opts(), self.home, _arg(argv, "--tasks").split(","),
                                  None).note
        srcs = argv[argv.index("--sources") + 1:]
        mans = [json.loads((self.home / "episodes" / s / "manifest.json").read_text())
                for s in srcs]
        hashes = sorted(m["content_hash"] for m in mans)
        episodes = sorted({dg for m in mans for dg in m["episode_digests"]})
        ch = _h(",".join(episodes))
        d = self.home / "datasets" / name / ch[:16]
        d.mkdir(parents=True)
        from wmx.schemas.taskset import mt19
        taskset = mt19().subset(_arg(argv, "--tasks").split(",")).to_dict()
        (d / "manifest.json").write_text(json.dumps({"sources": hashes, "content_hash": ch,
                                                     "episode_digests": episodes,
                                                     "taskset": taskset}))

    def train_offline(self, argv):
        run_dir = (Path(_arg(argv, "--resume")) if "--resume" in argv
                   else self.home / "runs" / _arg(argv, "--name"))
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.json").write_text("{}")
        (run_dir / "summary.json").write_text("{}")

    def evaluate(self, argv):
        rep = Path(_arg(argv, "--run")) / "report" if "--run" in argv else Path(
            _arg(argv, "--out"))
        rep.mkdir(parents=True)
        (rep / ("report.md" if "--run" in argv else "compare.md")).write_text("# report\n")
        (rep / "scores.png").write_bytes(b"png")


def test_stages_run_in_order_with_the_flags(tmp_path):
    home = tmp_path / "h"
    stubs = Stubs(home)
    o = opts(env_steps=3000, updates=50, batch_size=64, seeds=[0, 1], preset="tiny",
             eval_episodes=3, seed_steps=700, tasks="reacher-easy,cartpole-balance",
             num_samples=64)
    out = io.StringIO()
    res = demo.run_pipeline(o, home, runners=stubs.runners(), out=out)
    progs = [p for p, _ in stubs.calls]
    assert progs == ["train_online", "train_online", "beam", "train_offline", "evaluate"]
    # online: tasks in mt30 order, every flag passed through, a named run per task
    for (_, argv), task in zip(stubs.calls[:2], ("reacher-easy", "cartpole-balance")):
        assert _arg(argv, "--task") == task
        assert _arg(argv, "--env-steps") == "3000" and _arg(argv, "--eval-every") == "3000"
        assert _arg(argv, "--seed-steps") == "700" and _arg(argv, "--preset") == "tiny"
        assert _arg(argv, "--eval-episodes") == "3" and _arg(argv, "--home") == str(home)
        assert _arg(argv, "--iterations") == "2" and _arg(argv, "--num-samples") == "64"
        assert argv[argv.index("--seeds") + 1:argv.index("--seeds") + 3] == ["0", "1"]
        assert _arg(argv, "--name").startswith(f"demo-online-{task}-")
    # build: the demo's TaskSet subset from exactly the runs' episode sets
    beam = stubs.calls[2][1]
    assert beam[0] == "run" and beam[1].endswith("pipelines/build_mt19.py")
    assert Path(beam[1]).is_file()
    assert _arg(beam, "--tasks") == "reacher-easy,cartpole-balance"
    srcs = beam[beam.index("--sources") + 1:]
    assert len(srcs) == 4 and {s.split("/")[0] for s in srcs} == {"reacher-easy",
                                                                   "cartpole-balance"}
    # offline: the built dataset, the offline flags
    off = stubs.calls[3][1]
    name, h = _arg(off, "--dataset").split("@")
    assert res["dataset"].startswith(f"{name}@{h}") and len(h) == 12
    assert _arg(off, "--updates") == "50" and _arg(off, "--batch-size") == "64"
    assert _arg(off, "--eval-every") == "50" and 50 % int(_arg(off, "--log-every")) == 0
    assert _arg(off, "--preset") == "tiny" and _arg(off, "--eval-episodes") == "3"
    assert _arg(off, "--iterations") == "2" and _arg(off, "--num-samples") == "64"
    # evaluate: the offline run
    ev = stubs.calls[4][1]
    assert ev == ["--run", res["offline_run"], "--episodes", "3", "--home", str(home)]
    assert res["report"] == str(Path(res["offline_run"]) / "report" / "report.md")
    text = out.getvalue()
    assert "=== stage 1/5: train_online reacher-easy ===" in text
    assert "$ train_online --agent tdmpc2 --task reacher-easy" in text
    assert "$ beam run pipelines/build_mt19.py" in text or "$ beam run /" in text
    assert "report.md" in text and "bar plot:" in text and "scores.png" in text
    # the demo's seed steps (updates in the last quarter of its 1,000 agent steps)
    argv = demo.online_stage(opts(), home, "cup-catch").argv
    assert _arg(argv, "--seed-steps") == str(demo.DEMO_SEED_STEPS) == "750"
    assert [s["status"] for s in res["stages"]] == ["run"] * 5


def test_rerun_skips_finished_stages(tmp_path):
    home = tmp_path / "h"
    first = Stubs(home)
    r1 = demo.run_pipeline(opts(), home, runners=first.runners(), out=io.StringIO())
    again = Stubs(home)
    out = io.StringIO()
    r2 = demo.run_pipeline(opts(), home, runners=again.runners(), out=out)
    assert again.calls == []
    assert [s["status"] for s in r2["stages"]] == ["done"] * 6
    assert (r2["dataset"], r2["offline_run"]) == (r1["dataset"], r1["offline_run"])
    assert "skipped: already done" in out.getvalue()
    # changed offline flags: only the offline and evaluate stages run again
    third = Stubs(home)
    r3 = demo.run_pipeline(opts(updates=400), home, runners=third.runners(), out=io.StringIO())
    assert [p for p, _ in third.calls] == ["train_offline", "evaluate"]
    assert r3["dataset"] == r1["dataset"] and r3["offline_run"] != r1["offline_run"]


def test_a_stage_stopped_by_ctrl_c_says_rerun_to_continue(tmp_path):
    stopped = Stubs(tmp_path / "h", fail="train_online", fail_status=130)
    with pytest.raises(demo.DemoError, match=r"stage 1/\d+ \(train_online reacher-easy\) "
                                             r"was stopped by Ctrl-C.*rerun `wmx demo`"):
        demo.run_pipeline(opts(), tmp_path / "h", runners=stopped.runners(), out=io.StringIO())


def test_interrupted_stage_is_resumed(tmp_path):
    home = tmp_path / "h"
    failing = Stubs(home, fail="train_offline")
    with pytest.raises(demo.DemoError, match="train_offline.*exit status 3"):
        demo.run_pipeline(opts(), home, runners=failing.runners(), out=io.StringIO())
    # the run directory exists (config.json written) but did not finish
    off_name = _arg(failing.calls[-1][1], "--name")
    (home / "runs" / off_name).mkdir(parents=True)
    (home / "runs" / off_name / "config.json").write_text("{}")
    # an online run interrupted too
    on_dir = Path(demo.online_stage(opts(), home, "reacher-easy").result)
    (on_dir / "summary.json").unlink()
    second = Stubs(home)
    demo.run_pipeline(opts(), home, runners=second.runners(), out=io.StringIO())
    # the continued run exports the same episode set: the dataset is there already
    assert [p for p, _ in second.calls] == ["train_online", "train_offline", "evaluate"]
    assert second.calls[0][1] == ["--resume", str(on_dir)]
    assert second.calls[1][1] == ["--resume", str(home / "runs" / off_name)]


def test_dry_run_and_help(tmp_path, capsys):
    home = tmp_path / "h"
    assert wmx_main.main(["demo", "--home", str(home), "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert text.count("(to run)") == 6
    assert "$ train_online --agent tdmpc2 --task cartpole-balance" in text
    assert "--sources '<episode sets of the train_online runs>'" in text
    assert "--dataset '<dataset>'" in text and "evaluate --run '<train_offline run>'" in text
    assert "--name 'demo-offline-<hash>'" in text    # its hash covers the dataset, not built
    assert not home.exists()
    with pytest.raises(SystemExit):
        wmx_main.main(["demo", "--help"])
    help_text = capsys.readouterr().out
    for word in ("train_online", "build_mt19.py", "train_offline", "evaluate", "--resume",
                 "Scale up"):
        assert word in help_text


def test_bad_flags_are_errors(tmp_path, capsys):
    assert wmx_main.main(["demo", "--home", str(tmp_path), "--tasks", "walker-jog"]) == 2
    assert "walker-jog" in capsys.readouterr().err
    assert wmx_main.main(["demo", "--home", str(tmp_path), "--tasks", "probe-action"]) == 2
    with pytest.raises(SystemExit) as info:      # argparse: exit status 2
        wmx_main.main(["demo", "--home", str(tmp_path), "--updates", "0"])
    assert info.value.code == 2
    assert not (tmp_path / "runs").exists()


def test_dreamerv3_and_both_agents_offline(tmp_path):
    """--agent dreamerv3: DreamerV3 trained offline on the TD-MPC2 episodes (its preset's
    batch, --dreamerv3-updates); --agent both: both offline runs on the one dataset, then
    one comparison report (evaluate --runs); the TD-MPC2 run is the default demo's."""
    home = tmp_path / "h"
    stubs = Stubs(home)
    res = demo.run_pipeline(opts(agent="dreamerv3", dreamerv3_updates=20), home,
                            runners=stubs.runners(), out=io.StringIO())
    assert [p for p, _ in stubs.calls] == ["train_online"] * 3 + ["beam", "train_offline",
                                                                   "evaluate"]
    off = stubs.calls[4][1]
    assert _arg(off, "--agent") == "dreamerv3" and _arg(off, "--updates") == "20"
    assert "--batch-size" not in off and "--iterations" not in off
    assert _arg(off, "--name").startswith("demo-offline-dreamerv3-")
    assert stubs.calls[5][1][:2] == ["--run", res["offline_run"]]

    both = Stubs(home)
    out = io.StringIO()
    res2 = demo.run_pipeline(opts(agent="both", dreamerv3_updates=20), home,
                             runners=both.runners(), out=out)
    # the sources, the dataset and the DreamerV3 run are there: TD-MPC2 offline runs, then
    # the comparison of the two runs
    assert [p for p, _ in both.calls] == ["train_offline", "evaluate"]
    assert _arg(both.calls[0][1], "--agent") == "tdmpc2"
    tdmpc2_run = str(home / "runs" / _arg(both.calls[0][1], "--name"))
    assert res2["offline_runs"] == [tdmpc2_run, res["offline_run"]]
    ev = both.calls[1][1]
    assert ev[:3] == ["--runs", tdmpc2_run, res["offline_run"]]
    assert Path(_arg(ev, "--out")).parent == home / "reports"
    assert res2["report"] == str(Path(_arg(ev, "--out")) / "compare.md")
    # a rerun skips every stage, the comparison included
    again = Stubs(home)
    demo.run_pipeline(opts(agent="both", dreamerv3_updates=20), home, runners=again.runners(),
                      out=io.StringIO())
    assert again.calls == []
    assert "stage 6/7: train_offline dreamerv3" in out.getvalue()
    # the TD-MPC2 run is the one the default demo makes (same name: same flags)
    default = demo.offline_stage(opts(), home, res2["dataset"])
    assert default.result == tdmpc2_run and default.status == "done"
    # dry run of both: 7 stages, the comparison last
    text = demo.plan_text(opts(agent="both"), home)
    assert "7. evaluate (compare) (" in text and "--runs" in text


@pytest.mark.parametrize("flags,msg", [
    (["--updates", "0"], "--updates: 0 must be at least 1"),
    (["--agent", "both", "--dreamerv3-updates", "0"], "--dreamerv3-updates: 0 must be at least 1"),
    (["--batch-size", "0"], "--batch-size: 0 must be at least 1"),
    (["--eval-episodes", "0"], "--eval-episodes: 0 must be at least 1"),
    (["--seeds", "-1"], "--seeds: -1 must be at least 0"),
    (["--seed-steps", "-5"], "--seed-steps: -5 must be at least 0"),
    (["--seed-steps", "2.5"], "--seed-steps: '2.5' is not a whole number"),
    (["--preset", "huge"], "--preset: invalid choice: 'huge'"),
])
def test_bad_counts_are_refused_before_planning(tmp_path, capsys, flags, msg):
    with pytest.raises(SystemExit) as info:
        wmx_main.main(["demo", "--home", str(tmp_path / "h"), "--dry-run", *flags])
    assert info.value.code == 2 and msg in capsys.readouterr().err
    assert not (tmp_path / "h").exists()


def test_seed_steps_takes_what_train_online_takes(tmp_path, capsys):
    """--seed-steps: 0 (updates from the start) and a count written 1e3 reach train_online as
    integers; a negative value is refused by run_pipeline too (callers not using argparse)."""
    for given, passed in (("0", "0"), ("1e3", "1000")):
        assert wmx_main.main(["demo", "--home", str(tmp_path / "h"), "--dry-run",
                              "--seed-steps", given]) == 0
        assert f"--seed-steps {passed} --preset" in capsys.readouterr().out
    for bad, msg in (({"seed_steps": -5}, "--seed-steps must be >= 0, got -5"),
                     ({"updates": 0}, "--updates must be >= 1, got 0"),
                     ({"dreamerv3_updates": -1}, "--dreamerv3-updates must be >= 1, got -1")):
        with pytest.raises(ValueError, match=msg):
            demo.run_pipeline(opts(**bad), tmp_path / "h", runners=Stubs(tmp_path).runners(),
                              out=io.StringIO())
    assert not (tmp_path / "h").exists()


def test_repeated_seeds_are_refused(tmp_path, capsys):
    assert wmx_main.main(["demo", "--home", str(tmp_path / "h"), "--dry-run",
                          "--seeds", "0", "0"]) == 2
    assert "give each seed once" in capsys.readouterr().err


def test_the_demo_and_the_commands_after_it_share_one_home(tmp_path, monkeypatch, capsys):
    """`make demo` runs `wmx demo` without --home, so the demo writes into the data root the
    other commands read by default: `wmx runs ls` lists its runs and `wmx demo --agent
    dreamerv3` reuses its online stages and dataset; the demo ends by printing those
    commands, with --home only when its data root is not the default one."""
    import subprocess
    root = Path(__file__).resolve().parents[2]
    dry = subprocess.run(["make", "--no-print-directory", "-n", "-o", "install", "demo"], cwd=root, capture_output=True,
                         text=True, check=True).stdout.split()
    assert dry[-2:] == [".venv/bin/wmx", "demo"]          # no --home of its own
    dry = subprocess.run(["make", "--no-print-directory", "-n", "-o", "install", "demo", "HOME_DIR=/elsewhere"],
                         cwd=root, capture_output=True, text=True, check=True).stdout.split()
    assert dry[-3:] == ["demo", "--home", "/elsewhere"]

    monkeypatch.setenv("HOME", str(tmp_path / "user"))   # the default data root ~/.wmx
    monkeypatch.delenv("WMX_HOME", raising=False)
    home = tmp_path / "user" / ".wmx"
    stubs = Stubs(home)
    monkeypatch.setattr(demo, "RUNNERS", stubs.runners())
    assert wmx_main.main(["demo"]) == 0
    out = capsys.readouterr().out
    assert [p for p, _ in stubs.calls] == ["train_online"] * 3 + ["beam", "train_offline",
                                                                   "evaluate"]
    assert "\nruns:           wmx runs ls\n" in out
    dataset = next(ln.split()[-1] for ln in out.splitlines() if ln.startswith("dataset:"))
    assert f"\ndataset info:   wmx dataset info {dataset[:dataset.index('@') + 11]}\n" in out
    assert wmx_main.main(["runs", "ls"]) == 0
    listed = capsys.readouterr().out
    assert sum(f"demo-online-{t}-" in listed for t in TASKS) == 3 and "demo-offline-" in listed
    stubs.calls.clear()
    assert wmx_main.main(["demo", "--agent", "dreamerv3"]) == 0
    assert [p for p, _ in stubs.calls] == ["train_offline", "evaluate"]   # online reused
    assert _arg(stubs.calls[0][1], "--agent") == "dreamerv3"
    assert capsys.readouterr().out.count("skipped: already done") == 4

    other = tmp_path / "other"
    monkeypatch.setattr(demo, "RUNNERS", Stubs(other).runners())
    assert wmx_main.main(["demo", "--home", str(other)]) == 0
    assert f"\nruns:           wmx runs ls --home {other}\n" in capsys.readouterr().out


def test_empty_listings_name_the_data_root_they_read(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WMX_HOME", str(tmp_path / "h"))
    for argv, what in ((["runs", "ls"], "runs"), (["dataset", "ls"], "datasets"),
                       (["dataset", "sources"], "episodes")):
        assert wmx_main.main(argv) == 0
        line = capsys.readouterr().out
        assert line.count("\n") == 1
        assert f" in {tmp_path / 'h' / what} (WMX_HOME={tmp_path / 'h'}; another with --home " \
               "DIR or WMX_HOME=DIR); " in line, line
    assert wmx_main.main(["dataset", "ls", "mt19", "--home", str(tmp_path / "g")]) == 0
    assert capsys.readouterr().out.startswith(
        f"no datasets named mt19 in {tmp_path / 'g' / 'datasets'} (--home {tmp_path / 'g'}; ")
