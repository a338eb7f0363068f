"""--resume RUN_DIR of a directory the trainer did not write: a one-line error naming the fix."""
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


@pytest.mark.parametrize("cfg", [[], {}, {"agent": "tdmpc2"}])
def test_a_config_of_no_trainer_is_refused(tmp_path, cfg):
    d = _run(tmp_path, "x", cfg)
    with pytest.raises(ValueError, match="pass a run directory written by train_online"):
        resume_config(str(d), None, tmp_path, "train_online")
