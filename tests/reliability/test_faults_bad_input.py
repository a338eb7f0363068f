"""Fault injection, section 4 of issue 15's classes (docs/reliability.md counts them).

4. Bad input: one line, exit 2, nothing written (`BAD_INPUTS`).

Every case is fast: the synthetic dataset (`built`, conftest.py) is built once per module,
and the training cases reuse the session's tiny runs (tests/tiny_runs.py).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from faults_common import REPO, _one_line
from tiny_runs import T as TINY_T, TINY_RC

from wmx.cli.beam import main as beam_main
from wmx.cli.main import main as wmx_main
from wmx.evaluate import cli as evaluate_cli
from wmx.train_offline import cli as offline_cli
from wmx.train_online import cli as online_cli


# ---- 4. bad input: one line, exit 2, nothing written ----------------------------------------
@pytest.fixture(scope="module")
def offline_run(tiny_offline_dataset, tmp_path_factory):
    """An offline run directory (config.json only) on the tiny offline dataset."""
    from wmx.datasets.readers import open_dataset
    from wmx.runs.offline_config import OfflineRunConfig
    home, ds_dir = tiny_offline_dataset
    ds = open_dataset(ds_dir)
    rc = OfflineRunConfig(dataset=f"{ds.name}@{ds.content_hash}", taskset=ds.taskset.to_dict(),
                          seeds=(0, 1), updates=6, batch_size=16, preset="tiny", log_every=2,
                          eval_every=4, checkpoint_every=2, eval_episodes=2)
    run_dir = tmp_path_factory.mktemp("offline-runs") / "runs" / "off"
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps(rc.to_json(), indent=1, sort_keys=True))
    return home, run_dir


ONLINE, OFFLINE, BEAM, WMX, EVALUATE = "train_online", "train_offline", "beam", "wmx", "evaluate"
BAD_INPUTS = [
    # (id, command, argv with {run} {offrun} {home} {file} {ts} {job} {tst}, expected text)
    ("resume-other-task", ONLINE, "--resume {run} --task probe-constant",
     "--task probe-constant conflicts with the run's saved task probe-action"),
    ("resume-other-seeds", ONLINE, "--resume {run} --seeds 0 1",
     "--seeds 0 1 conflicts with the run's saved seeds 0 3"),
    ("resume-fewer-env-steps", ONLINE, "--resume {run} --env-steps 60", "may only grow"),
    ("resume-extend-finished", ONLINE, "--resume {run} --env-steps 240", "has finished"),
    ("resume-other-batch", ONLINE, "--resume {run} --batch-size 8",
     "batch_size=8 conflicts with the run's saved batch_size=16 (the preset's)"),
    ("resume-other-set", ONLINE, "--resume {run} --set horizon=5", "horizon=5 conflicts"),
    ("resume-set-null", ONLINE, "--resume {run} --set discount=null",   # null is a change too
     "discount=None conflicts with the run's saved discount=0.95 (the preset's)"),
    ("resume-set-invalid", ONLINE, "--resume {run} --set horizon=null",  # as a new run says
     "TDMPC2Config field horizon=None: takes an integer (e.g. --set horizon=5)"),
    ("resume-set-typo", ONLINE, "--resume {run} --set horizn=3",
     "the run's agent config has no field 'horizn'; did you mean 'horizon'"),
    ("resume-name", ONLINE, "--resume {run} --name other", "--name does not apply"),
    ("seed-2**32", ONLINE, "--task probe-action --seeds 4294967296 --home {home}",
     "seeds must be integers in [0, 2**32)"),
    ("seed-negative", ONLINE, "--task probe-action --seeds -1 --home {home}",
     "seeds must be integers in [0, 2**32)"),
    ("home-is-a-file", ONLINE, "--task probe-action --preset tiny --home {file}",
     "is a file, not a directory"),
    ("offline-seed-2**32", OFFLINE, "--dataset {tst} --home {dshome} --seeds 4294967296 "
     "--dry-run", "seeds must be integers in [0, 2**32)"),
    ("offline-resume-fewer-updates", OFFLINE, "--resume {offrun} --updates 2", "may only grow"),
    ("offline-resume-other-batch", OFFLINE, "--resume {offrun} --batch-size 8",
     "--batch-size 8 conflicts with the run's saved batch_size 16"),
    ("offline-resume-set-invalid", OFFLINE, "--resume {offrun} --set horizon=abc",
     "TDMPC2Config field horizon='abc': takes an integer (e.g. --set horizon=5)"),
    ("offline-resume-other-tasks", OFFLINE, "--resume {offrun} --tasks cartpole-balance",
     "--tasks cartpole-balance conflicts with the run's saved train_tasks None"),
    ("beam-unknown-option", BEAM, "run {job} --taskset {ts} --home {dshome} --no_such_option=1",
     "unknown option --no_such_option=1"),
    ("beam-unknown-runner", BEAM, "run {job} --taskset {ts} --home {dshome} "
     "--runner=NoSuchRunner", "unknown runner 'NoSuchRunner'"),
    ("dataset-info-home-file", WMX, "dataset info tst@latest --home {file}",
     "is a file, not a directory"),
    ("evaluate-out-file", EVALUATE, "--run {run} --out {file} --force",
     "is a file, not a report directory"),
]


def _main(cmd):
    return {ONLINE: online_cli.main, OFFLINE: offline_cli.main, BEAM: beam_main,
            WMX: wmx_main, EVALUATE: evaluate_cli.main}[cmd]


def _listing(*roots: Path) -> list[str]:
    return sorted(str(p) for r in roots for p in Path(r).rglob("*"))


@pytest.mark.parametrize("case", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_is_one_line_exit_2_nothing_written(case, tiny_online_run, offline_run,
                                                     tiny_offline_dataset, tmp_path, capsys):
    _, cmd, argv, text = case
    _, _, run_dir, _ = tiny_online_run
    dshome, offrun = offline_run
    (tmp_path / "afile").write_text("not a directory")
    ts = tmp_path / "ts.json"
    ts.write_text(json.dumps(json.loads((tiny_offline_dataset[1] / "manifest.json")
                                        .read_text())["taskset"]))
    subs = {"run": run_dir, "offrun": offrun, "home": tmp_path / "home",
            "file": tmp_path / "afile", "ts": ts, "dshome": dshome,
            "job": REPO / "pipelines" / "build_taskset.py", "tst": "tst@latest"}
    args = [a.format(**{k: str(v) for k, v in subs.items()}) for a in argv.split()]
    roots = (tmp_path, run_dir, offrun, dshome)
    before = _listing(*roots)
    capsys.readouterr()
    assert _main(cmd)(args) == 2
    lines = _one_line(capsys.readouterr().err)
    assert len(lines) == 1 and "error:" in lines[0] and text in lines[0], lines
    assert _listing(*roots) == before


HOME_FILE_COMMANDS = [
    # (id, command, argv with {home} for the data root and {x} for a path that does not exist)
    ("train_online", ONLINE, "--task probe-action --preset tiny --home {home}"),
    ("train_offline", OFFLINE, "--dataset tst@latest --preset tiny --home {home}"),
    ("evaluate-run", EVALUATE, "--run {x} --home {home}"),
    ("evaluate-runs", EVALUATE, "--runs {x} {x}2 --out {x}3 --home {home}"),
    ("runs-ls", WMX, "runs ls --home {home}"),
    ("runs-info", WMX, "runs info some-run --home {home}"),
    ("dataset-ls", WMX, "dataset ls --home {home}"),
    ("dataset-synth", WMX, "dataset synth --rows 100 --episode-length 8 --home {home}"),
    ("demo", WMX, "demo --dry-run --home {home}"),
    ("beam", BEAM, "run " + str(REPO / "pipelines" / "build_mt19.py") + " --home {home}"),
]


@pytest.mark.parametrize("below", [False, True], ids=["file", "below-a-file"])
@pytest.mark.parametrize("case", HOME_FILE_COMMANDS, ids=[c[0] for c in HOME_FILE_COMMANDS])
def test_home_that_is_a_file_is_one_line_before_anything(case, below, tmp_path, capsys):
    """--home FILE (or FILE/sub): every CLI says at once that FILE is a file, exit 2,
    nothing created (wmx.paths.wmx_home)."""
    _, cmd, argv = case
    afile = tmp_path / "afile"
    afile.write_text("not a directory")
    home = afile / "sub" if below else afile
    subs = {"home": str(home), "x": str(tmp_path / "nothing")}
    before = _listing(tmp_path)
    capsys.readouterr()
    assert _main(cmd)([a.format(**subs) for a in argv.split()]) == 2
    lines = _one_line(capsys.readouterr().err)
    assert len(lines) == 1 and f"{afile} is a file, not a directory" in lines[0], lines
    assert _listing(tmp_path) == before and afile.read_text() == "not a directory"


def test_wmx_home_from_the_environment_that_is_a_file(tmp_path, monkeypatch, capsys):
    (tmp_path / "afile").write_text("")
    monkeypatch.setenv("WMX_HOME", str(tmp_path / "afile"))
    assert wmx_main(["runs", "ls"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: WMX_HOME={tmp_path / 'afile'}: ") and "\n" not in err
    assert "is a file, not a directory" in err


def test_wmx_accepts_home_before_or_after_the_subcommand(built, capsys):
    home, ds = built
    for argv in (["dataset", "ls", "--home", str(home)], ["dataset", "--home", str(home), "ls"],
                 ["--home", str(home), "dataset", "ls"]):
        assert wmx_main(argv) == 0
        assert ds.name[:10] in capsys.readouterr().out


def test_offline_defaults_fit_each_other_and_resume_may_extend(offline_run, capsys):
    dshome, offrun = offline_run
    assert offline_cli.main(["--dataset", "tst@latest", "--home", str(dshome), "--updates",
                             "300", "--eval-every", "300", "--preset", "tiny",
                             "--batch-size", "16", "--dry-run"]) == 0
    assert "at the end (" in capsys.readouterr().out         # --eval-every = --updates
    before = (offrun / "config.json").read_text()
    assert offline_cli.main(["--resume", str(offrun), "--updates", "8", "--batch-size", "16",
                             "--dry-run"]) == 0                     # extend, same batch: fine
    assert "8 updates" in capsys.readouterr().out
    assert (offrun / "config.json").read_text() == before          # a dry run changes nothing


def test_extending_a_run_whose_replay_would_grow_is_refused(tmp_path, capsys):
    """TD-MPC2's replay holds the whole run when it is shorter than buffer_size, so a
    longer run has another replay: --env-steps cannot extend it exactly (the positive
    case, with a replay that keeps its size, is test_resume_extend.py, slow)."""
    from wmx.train_online import loop
    run_dir = tmp_path / "runs" / "part"
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps(TINY_RC.to_json()))
    assert not loop.run(TINY_RC, run_dir, None, progress=False, stop_after_chunks=1)["finished"]
    before = _listing(run_dir)
    capsys.readouterr()
    assert online_cli.main(["--resume", str(run_dir), "--env-steps", str(12 * TINY_T)]) == 2
    (line,) = _one_line(capsys.readouterr().err)
    assert "a longer run has a larger replay" in line and "start a new run" in line
    assert _listing(run_dir) == before


def test_counts_may_be_written_1e3(capsys):
    assert online_cli.main(["--task", "probe-action", "--preset", "tiny", "--env-steps", "1e3",
                            "--batch-size", "1_000", "--dry-run"]) == 0
    assert "1,000 env steps per seed" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:                 # argparse's usage error
        online_cli.main(["--task", "probe-action", "--batch-size", "0.5", "--dry-run"])
    assert e.value.code == 2 and "'0.5' is not a whole number" in capsys.readouterr().err
