"""benchmarks/learning/online_check.py around a stand-in trainer (the check itself trains
for hours and is not part of the suite): the run lock is held while it trains, the
curves come from metrics.csv, the threshold is judged on the chosen kind of return."""
import csv
import json
import sys
from pathlib import Path

import pytest

_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "learning"
sys.path.insert(0, str(_DIR))
import online_check  # noqa: E402

from wmx.runs.owner import probe  # noqa: E402

ROWS = [  # (kind, env_steps, seed, return)
    ("train", 16_000, 0, 120.0), ("train", 16_000, 1, 80.0),
    ("eval", 16_000, 0, 200.0), ("eval", 16_000, 1, 100.0),
    ("train", 32_000, 0, 310.0), ("train", 32_000, 1, 330.0),
    ("eval", 32_000, 0, 250.0), ("eval", 32_000, 1, 270.0),
]


def _fake_run(seen):
    def run(rc, run_dir, export, progress=True, deadline=None, stop_request=None):
        seen["owner"] = probe(run_dir)        # who holds the run while it trains
        seen["deadline"] = deadline
        seen["stop_request"] = stop_request   # Ctrl-C's (wmx.runs.interrupt)
        with (run_dir / "metrics.csv").open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["seed", "kind", "env_steps", "return", "wall_s"])
            for kind, x, seed, r in ROWS:
                w.writerow([seed, kind, x, r, x / 100])
        return {"finished": True, "env_steps": 32_000}
    return run


def test_check_holds_the_run_lock_and_judges_the_chosen_returns(tmp_path, monkeypatch):
    seen = {}
    monkeypatch.setattr(online_check, "run", _fake_run(seen))
    monkeypatch.setattr(online_check.online_cli, "make_export", lambda *a, **k: None)
    out = tmp_path / "out"
    argv = ["--task", "reacher-easy", "--env-steps", "32000", "--home", str(tmp_path / "home"),
            "--out", str(out), "--threshold", "300", "--checkpoint-every", "10",
            "--chunk-ticks", "50"]
    res = online_check.main("dreamerv3", {"eval_every": 16_000, "threshold_on": "train"}, argv)

    run_dir = Path(res["run_dir"])
    assert seen["owner"] is not None and seen["owner"].pid > 0
    assert probe(run_dir) is None                      # released once the check ends
    assert seen["deadline"] is None
    assert seen["stop_request"] is not None and not seen["stop_request"].is_set()
    cfg = json.loads((run_dir / "config.json").read_text())
    assert cfg["chunk_ticks"] == 50 and cfg["n_envs"] == 16     # the agent preset's envs
    assert cfg["checkpoint_every_chunks"] == 10
    assert res["train_curve"] == {"16000": [120.0, 80.0], "32000": [310.0, 330.0]}
    assert res["final_mean_eval_return"] == 260.0
    assert res["best_mean_return_judged"] == 320.0 and res["passed"] is True
    assert res["run_wall_s"] == 320.0                   # the last logged wall_s
    saved = json.loads((out / "dreamerv3_online_reacher-easy.json").read_text())
    assert saved["passed"] is True and (out / "dreamerv3_online_reacher-easy.png").stat().st_size
    assert saved["run_dir"] == f"runs/{run_dir.name}"  # relative to the data root, not a path

    # the same rows judged on the eval returns: best 260 < 300
    import wmx.version
    monkeypatch.setattr(wmx.version, "code_version", lambda: "fedcba9")
    res = online_check.main("dreamerv3", {"eval_every": 16_000}, argv[:-2] + ["--resume",
                                                                            str(run_dir)])
    assert res["threshold_on"] == "eval" and res["passed"] is False
    # every training call records its commit, device and env steps; the result names them
    calls = json.loads((run_dir / "benchmark.json").read_text())["training_calls"]
    assert [(c["env_steps_from"], c["env_steps_to"]) for c in calls] == \
        [(0, 32_000), (32_000, 32_000)]
    assert calls[1]["code_version"] == "fedcba9" and calls[1]["device"].startswith("cpu")
    # the second call found the run finished and trained nothing: not named in the result
    assert (res["code_version"], res["device"]) == (calls[0]["code_version"],
                                                    calls[0]["device"])
    assert res["code_version"] != "fedcba9"


def test_a_row_a_killed_process_left_incomplete_does_not_stop_a_resume(tmp_path,
                                                                     monkeypatch):
    """metrics.csv ending in a row a killed trainer left incomplete (the trainer drops it,
    `wmx.metrics_csv.kept_rows`): the check resumes, its call starting at the last whole
    row."""
    seen = {}
    monkeypatch.setattr(online_check, "run", _fake_run(seen))
    monkeypatch.setattr(online_check.online_cli, "make_export", lambda *a, **k: None)
    out = str(tmp_path / "out")
    res = online_check.main("dreamerv3", {"eval_every": 16_000},
                            ["--task", "reacher-easy", "--env-steps", "48000", "--home",
                             str(tmp_path / "home"), "--out", out])
    run_dir = Path(res["run_dir"])
    with (run_dir / "metrics.csv").open("a") as f:
        f.write("0,ev")                                 # killed while writing a row
    online_check.main("dreamerv3", {}, ["--resume", str(run_dir), "--out", out])
    calls = json.loads((run_dir / "benchmark.json").read_text())["training_calls"]
    assert (calls[-1]["env_steps_from"], calls[-1]["env_steps_to"]) == (32_000, 32_000)


def test_the_judging_flags_are_kept_with_the_run(tmp_path, monkeypatch):
    """--threshold and --threshold-on typed when the run starts judge its resumed calls
    that do not type them; typed again, they replace the kept ones."""
    monkeypatch.setattr(online_check, "run", _fake_run({}))
    monkeypatch.setattr(online_check.online_cli, "make_export", lambda *a, **k: None)
    out = str(tmp_path / "out")
    run_dir = online_check.main("dreamerv3", {}, [
        "--task", "reacher-easy", "--home", str(tmp_path / "home"), "--out", out,
        "--threshold", "300", "--threshold-on", "train"])["run_dir"]
    bench = json.loads((Path(run_dir) / "benchmark.json").read_text())
    assert (bench["threshold"], bench["threshold_on"]) == (300.0, "train")
    res = online_check.main("dreamerv3", {}, ["--resume", run_dir, "--out", out])
    assert (res["threshold"], res["threshold_on"], res["passed"]) == (300.0, "train", True)
    res = online_check.main("dreamerv3", {}, ["--resume", run_dir, "--report-only",
                                              "--threshold", "400", "--out", out])
    assert (res["threshold"], res["threshold_on"], res["passed"]) == (400.0, "train", False)
    res = online_check.main("dreamerv3", {}, ["--resume", run_dir, "--out", out])
    assert res["threshold"] == 400.0 and res["passed"] is False


def test_report_only_trains_nothing(tmp_path, monkeypatch):
    seen = {}
    monkeypatch.setattr(online_check, "run", _fake_run(seen))
    monkeypatch.setattr(online_check.online_cli, "make_export", lambda *a, **k: None)
    argv = ["--task", "reacher-easy", "--home", str(tmp_path / "home"), "--out", str(tmp_path)]
    run_dir = online_check.main("dreamerv3", {}, argv)["run_dir"]

    def no_training(*a, **k):
        raise AssertionError("--report-only trained")
    monkeypatch.setattr(online_check, "run", no_training)
    res = online_check.main("dreamerv3", {}, ["--resume", run_dir, "--report-only",
                                              "--threshold", "300", "--threshold-on", "train",
                                              "--out", str(tmp_path)])
    assert res["finished"] is False and res["env_steps_reached"] == 32_000
    assert res["passed"] is True
    with pytest.raises(SystemExit):
        online_check.main("dreamerv3", {}, ["--report-only", "--out", str(tmp_path)])


def test_resume_keeps_the_runs_config(tmp_path, monkeypatch, capsys):
    """--resume with a run flag that differs from the run's config is refused in one line
    before anything is written (a typed flag is never silently ignored); equal flags and
    the output flags pass; --chunk-ticks may change and is recorded under the lock (not
    with --report-only, which trains nothing); another agent's run and a run another process trains are refused."""
    from wmx.runs.owner import hold_run
    seen = {}
    monkeypatch.setattr(online_check, "run", _fake_run(seen))
    monkeypatch.setattr(online_check.online_cli, "make_export", lambda *a, **k: None)
    out = str(tmp_path / "out")
    run_dir = online_check.main("dreamerv3", {}, [
        "--task", "reacher-easy", "--env-steps", "32000", "--seeds", "0", "--home",
        str(tmp_path / "home"), "--out", out, "--set", "train_ratio=1024"])["run_dir"]
    cfg = (Path(run_dir) / "config.json").read_text()
    for flags, msg in [(["--task", "cartpole-balance"], "--task cartpole-balance conflicts"),
                       (["--env-steps", "64000"], "--env-steps 64000 conflicts"),
                       (["--seeds", "0", "1"], "--seeds 0 1 conflicts"),
                       (["--set", "train_ratio=512"], "train_ratio=512 conflicts")]:
        with pytest.raises(SystemExit, match=msg + ".*start a new check run"):
            online_check.main("dreamerv3", {}, ["--resume", run_dir, "--out", out, *flags])
    with pytest.raises(SystemExit, match="a dreamerv3 run; resume it with .*dreamerv3_online"):
        online_check.main("tdmpc2", {}, ["--resume", run_dir, "--out", out])
    with hold_run(run_dir):
        with pytest.raises(SystemExit, match=r"pid \d+ .* trains it now"):
            online_check.main("dreamerv3", {}, ["--resume", run_dir, "--out", out])
    assert (Path(run_dir) / "config.json").read_text() == cfg
    with pytest.raises(SystemExit, match="--chunk-ticks must be > 0"):
        online_check.main("dreamerv3", {}, ["--resume", run_dir, "--out", out,
                                            "--chunk-ticks", "0"])
    with pytest.raises(SystemExit, match="is not the run's home folder"):
        online_check.main("dreamerv3", {}, ["--resume", run_dir, "--out", out,
                                            "--home", str(tmp_path)])
    with pytest.raises(SystemExit):                 # nothing trained: it would not be kept
        online_check.main("dreamerv3", {}, ["--resume", run_dir, "--out", out,
                                            "--report-only", "--chunk-ticks", "25"])
    assert "--chunk-ticks 25 with --report-only" in capsys.readouterr().err
    assert (Path(run_dir) / "config.json").read_text() == cfg
    seen.clear()
    res = online_check.main("dreamerv3", {}, [
        "--resume", run_dir, "--out", out, "--task", "reacher-easy", "--seeds", "0",
        "--set", "train_ratio=1024", "--chunk-ticks", "25", "--threshold", "100"])
    assert seen["owner"] is not None and res["passed"] is True
    assert json.loads((Path(run_dir) / "config.json").read_text())["chunk_ticks"] == 25
    before = (Path(run_dir) / "config.json").read_text()
    with pytest.raises(SystemExit, match="checkpoint"):    # in the producer's config hash
        online_check.main("dreamerv3", {}, ["--resume", run_dir, "--out", out,
                                            "--checkpoint-every", "4"])
    assert (Path(run_dir) / "config.json").read_text() == before


def test_wmx_runs_info_names_the_checks_own_resume(tmp_path, monkeypatch, capsys):
    """The check records its resume command in the run's benchmark.json (a run from before
    gains it when resumed); `wmx runs info` prints it; the offline checks and device_check
    refuse the online run."""
    from wmx.cli.main import main as wmx_main
    def header_only(rc, run_dir, *a, **k):          # stopped inside its first chunk
        (run_dir / "metrics.csv").write_text("seed,kind,env_steps,return,wall_s\n")
        return {"finished": False, "env_steps": 0}
    monkeypatch.setattr(online_check, "run", header_only)
    monkeypatch.setattr(online_check.online_cli, "make_export", lambda *a, **k: None)
    home, out = tmp_path / "home", str(tmp_path / "out")
    run_dir = Path(online_check.main("dreamerv3", {}, ["--task", "reacher-easy", "--home",
                                                       str(home), "--out", out])["run_dir"])
    cmd = "python benchmarks/learning/dreamerv3_online.py --resume"
    bench = json.loads((run_dir / "benchmark.json").read_text())
    assert bench["resume_command"] == cmd and len(bench["training_calls"]) == 1
    assert (Path(__file__).resolve().parents[2] / cmd.split()[1]).is_file()
    (run_dir / "benchmark.json").unlink()
    online_check.main("dreamerv3", {}, ["--resume", str(run_dir), "--out", out])
    assert json.loads((run_dir / "benchmark.json").read_text())["resume_command"] == cmd
    assert sorted(p.name for p in run_dir.iterdir()) == ["benchmark.json", "config.json",
                                                         "metrics.csv"]
    capsys.readouterr()
    assert wmx_main(["runs", "info", str(run_dir), "--home", str(home)]) == 0
    assert f"status not started (continue with: {cmd} {run_dir})" in capsys.readouterr().out
    import dreamerv3_offline
    with pytest.raises(SystemExit, match="an online run"):
        dreamerv3_offline.main(["--resume", str(run_dir), "--out", out])
    import subprocess

    def device_check_plan():
        return subprocess.run([sys.executable, str(_DIR.parent / "device_check.py"), "--plan",
                               "--dreamerv3-offline-run", str(run_dir)], capture_output=True,
                              text=True)
    r = device_check_plan()
    assert r.returncode == 2 and "an online run" in r.stderr
    (run_dir / "config.json").write_text("[]")
    with pytest.raises(SystemExit, match="holds no JSON object"):
        online_check.main("dreamerv3", {}, ["--resume", str(run_dir), "--out", out])
    (run_dir / "config.json").write_text("{damaged")
    with pytest.raises(SystemExit, match="config.json is unreadable"):
        online_check.main("dreamerv3", {}, ["--resume", str(run_dir), "--out", out])
    r = device_check_plan()
    assert r.returncode == 2 and "config.json is unreadable" in r.stderr, r.stderr


def test_portable_writes_paths_relative_to_the_data_root(tmp_path, monkeypatch):
    from check_run import portable
    monkeypatch.chdir(tmp_path.parent)
    home = tmp_path / "home"
    run = home / "runs" / "r1"
    res = {"run_dir": str(run), "sources": [str(home / "runs" / "s0")],
           "dataset_path": str(home / "datasets" / "mt19" / "abc"), "home": str(home),
           "command": f"model_bias.py --run 1m={run} --out {tmp_path.parent}/x/r.json",
           "n": 3, "elsewhere": "/opt/elsewhere"}
    assert portable(res, run) == {
        "run_dir": "runs/r1", "sources": ["runs/s0"], "dataset_path": "datasets/mt19/abc",
        "home": ".", "command": "model_bias.py --run 1m=runs/r1 --out x/r.json", "n": 3,
        "elsewhere": "/opt/elsewhere"}


def test_check_turns_on_the_compile_cache_in_the_runs_home(tmp_path, monkeypatch):
    # a resumed check on an accelerator loads its programs instead of compiling them again
    import wmx.runs.cli_common as cli_common
    homes = []
    monkeypatch.setattr(cli_common, "enable_compile_cache", lambda home: homes.append(home))
    monkeypatch.setattr(online_check, "run", _fake_run({}))
    monkeypatch.setattr(online_check.online_cli, "make_export", lambda *a, **k: None)
    home = tmp_path / "home"
    argv = ["--task", "reacher-easy", "--env-steps", "32000", "--home", str(home),
            "--out", str(tmp_path / "out")]
    res = online_check.main("dreamerv3", {"eval_every": 16_000}, argv)
    assert homes == [home.resolve()]
    online_check.main("dreamerv3", {"eval_every": 16_000},
                      ["--resume", res["run_dir"], "--out", str(tmp_path / "out")])
    assert homes == [home.resolve()] * 2
