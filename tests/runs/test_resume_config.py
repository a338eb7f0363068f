"""--resume RUN_DIR of a directory the trainer did not write, and --name values that are
not one folder under <home>/runs/: one-line errors naming the fix."""
import json

import pytest

from wmx.runs.cli_common import resume_config


def _run(tmp_path, name, cfg):
    d = tmp_path / "runs" / name
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def test_another_trainers_run_names_that_trainer(tmp_path):
    online = _run(tmp_path, "on", {"task": "cartpole-balance", "agent": "tdmpc2"})
    offline = _run(tmp_path, "off", {"dataset": "mt19@" + "0" * 64, "agent": "tdmpc2"})
    with pytest.raises(ValueError, match=r"not a train_offline run .*'dataset'.*continue it "
                                         rf"with `train_online --resume {online}`"):
        resume_config(str(online), None, tmp_path, "train_offline")
    with pytest.raises(ValueError, match=rf"continue it with `train_offline --resume {offline}`"):
        resume_config(str(offline), None, tmp_path, "train_online")
    run_dir, cfg, home = resume_config(str(online), None, tmp_path / "elsewhere", "train_online")
    assert (run_dir, cfg["task"], home) == (online, "cartpole-balance", tmp_path)


def test_a_bare_run_name_resolves_under_the_home(tmp_path, monkeypatch):
    """--resume NAME (as `wmx runs ls` lists it) is <home>/runs/NAME unless the working
    folder has a NAME; an unknown name says where it looked."""
    run = _run(tmp_path / "home", "cart", {"task": "cartpole-balance"})
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    run_dir, cfg, home = resume_config("cart", None, tmp_path / "home", "train_online")
    assert (run_dir, cfg["task"], home) == (run, "cartpole-balance", tmp_path / "home")
    local = work / "cart"
    local.mkdir()
    (local / "config.json").write_text(json.dumps({"task": "walker-walk"}))
    assert resume_config("cart", None, tmp_path / "home", "train_online")[1]["task"] == \
        "walker-walk"                                        # the working folder's wins
    with pytest.raises(FileNotFoundError, match=r"nope: no such directory, nor a run "
                                                r".*home/runs/nope; .*or the name of one "
                                                r"under .*home/runs \(`wmx runs ls`\)"):
        resume_config("nope", None, tmp_path / "home", "train_online")
    with pytest.raises(FileNotFoundError, match=r"/x/y: no such directory; pass"):  # a path:
        resume_config(str(tmp_path / "x" / "y"), None, tmp_path / "home", "train_online")
    (work / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"empty: no config.json there"):
        resume_config("empty", None, tmp_path / "home", "train_online")


@pytest.mark.parametrize("cfg", [[], {}, {"agent": "tdmpc2"}])
def test_a_config_of_no_trainer_is_refused(tmp_path, cfg):
    d = _run(tmp_path, "x", cfg)
    with pytest.raises(ValueError, match="pass a run directory written by train_online"):
        resume_config(str(d), None, tmp_path, "train_online")


@pytest.mark.parametrize("name", ["../escape", "a/b", ".hidden", "", "x" * 201])
def test_run_names_that_are_not_one_visible_folder_are_refused(name):
    import argparse

    from wmx.runs.cli_common import run_name
    with pytest.raises(argparse.ArgumentTypeError):
        run_name(name)
    assert run_name("cartpole-seed0_v2") == "cartpole-seed0_v2"


def test_train_online_refuses_a_path_as_name_before_anything_runs(tmp_path, capsys):
    from wmx.train_online import cli
    with pytest.raises(SystemExit) as info:
        cli.main(["--task", "probe-action", "--preset", "tiny", "--name", "../escape",
                  "--home", str(tmp_path / "h"), "--dry-run"])
    assert info.value.code == 2 and "one folder name under <home>/runs/" in capsys.readouterr().err
    assert not (tmp_path / "h").exists()


def test_resuming_a_run_without_checkpoints_but_with_metrics_warns(tmp_path, caplog):
    """checkpoints/ deleted: --resume starts again from the beginning, said in a warning
    naming the metrics rows it replaces; a run with a checkpoint, or no rows yet, is quiet."""
    import logging

    from wmx.runs.cli_common import warn_if_restarting
    run = _run(tmp_path, "r", {"task": "cartpole-balance"})
    assert not warn_if_restarting(run)                       # no metrics.csv yet
    (run / "metrics.csv").write_text("seed,kind,agent_steps\n")
    assert not warn_if_restarting(run)                       # header only
    (run / "metrics.csv").write_text("seed,kind,agent_steps\n0,train,500\n0,eval,500\n")
    with caplog.at_level(logging.WARNING, logger="wmx.runs"):
        assert warn_if_restarting(run)
    assert "no checkpoint" in caplog.text and "2 metrics.csv rows" in caplog.text
    (run / "checkpoints" / f"{500:012d}").mkdir(parents=True)
    (run / "checkpoints" / f"{500:012d}" / "host.json").write_text("{}")
    assert not warn_if_restarting(run)
