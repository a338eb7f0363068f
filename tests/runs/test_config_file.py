"""``--config FILE`` (YAML or JSON): precedence flag > file > preset > default, a run's
saved config.json given back, one-line errors. Parsing only: nothing is trained."""
from __future__ import annotations

import json

import pytest

from tiny_runs import TINY_RC
from wmx.runs.config_file import PRECEDENCE, parse_with_config
from wmx.train_online import cli as online


def _rc(argv):
    return online.config_from_args(parse_with_config(online.build_parser(), argv))


def _write(path, text):
    path.write_text(text)
    return str(path)


BASE = ["--task", "probe-action", "--preset", "tiny"]


def test_precedence_flag_file_preset_default(tmp_path):
    from wmx.agents.registry import get_agent
    from wmx.envs.registry import get_task
    preset = get_agent("tdmpc2", "online").make_config("tiny", {}, task=get_task("probe-action"))
    assert preset.horizon != 2 and preset.num_samples != 24
    y = _write(tmp_path / "c.yaml", "env_steps: 1e3\nseeds: [4, 5]\neval-every: 200\n"
                                    "agent_overrides: {horizon: 2, num_samples: 24}\n")
    rc = _rc(BASE)                                                 # defaults
    assert (rc.env_steps, rc.seeds, rc.eval_every) == (20_000, (0,), 5_000)
    rc = _rc([*BASE, "--config", y])                               # file > default
    assert (rc.env_steps, rc.seeds, rc.eval_every) == (1_000, (4, 5), 200)
    assert rc.agent_config.horizon == 2 and rc.agent_config.num_samples == 24   # file > preset
    assert rc.agent_config.iterations == preset.iterations                      # preset kept
    rc = _rc([*BASE, "--config", y, "--env-steps", "500", "--seeds", "1",      # flag > file
              "--set", "horizon=3", "--num-samples", "16"])
    assert (rc.env_steps, rc.seeds, rc.eval_every) == (500, (1,), 200)
    assert rc.agent_config.horizon == 3 and rc.agent_config.num_samples == 16
    j = _write(tmp_path / "c.json", json.dumps({"preset": "cpu", "task": "probe-constant"}))
    rc = _rc(["--config", j])                                      # JSON; file gives the task
    assert (rc.task, rc.preset) == ("probe-constant", "cpu")
    assert _rc(["--config", j, "--preset", "tiny"]).preset == "tiny"


def test_saved_config_json_reproduces_the_run(tmp_path):
    """A run's config.json given back as it is: the same run config (same hash)."""
    saved = _write(tmp_path / "config.json", json.dumps(TINY_RC.to_json(), indent=1))
    rc = _rc(["--config", saved])
    assert rc == TINY_RC and rc.config_hash() == TINY_RC.config_hash()
    rc = _rc(["--config", saved, "--env-steps", "240"])
    assert rc.env_steps == 240 and rc.agent_overrides == TINY_RC.agent_overrides


def test_saved_offline_config_json(tmp_path):
    """An offline run's config.json (derived fields and metadata skipped) sets its flags."""
    from wmx.train_offline import cli as offline
    saved = {"dataset": "tst@" + "a" * 64, "taskset": {"name": "x"}, "agent": "tdmpc2",
             "seeds": [0, 1], "updates": 6, "batch_size": 16, "preset": "tiny",
             "agent_overrides": {"horizon": 2}, "log_every": 2, "eval_every": 4,
             "checkpoint_every": 2, "eval_episodes": 2, "tasks": None, "episode_length": None,
             "stream": False, "devices": 1, "resolved_agent_config": {}, "code_version": "x",
             "dataset_path": "/x", "training_hash": "y", "created": "2026-12-01T00:00:00"}
    args = parse_with_config(offline.build_parser(),
                             ["--config", _write(tmp_path / "config.json", json.dumps(saved))])
    assert (args.dataset, args.seeds, args.updates, args.batch_size, args.tasks, args.stream) \
        == (saved["dataset"], [0, 1], 6, 16, None, False)
    from wmx.runs.cli_common import agent_overrides
    assert agent_overrides(args) == {"horizon": 2}


def test_saved_offline_config_keeps_trained_and_evaluated_tasks_apart(tmp_path):
    """A saved offline config.json names the trained tasks ``train_tasks`` and the evaluated
    ones ``tasks`` (the run config's fields), and has ``stream_chunk`` (no flag): it gives
    --tasks and --eval-tasks back as they were (it stopped at "unknown key
    'stream_chunk'", and its ``tasks`` would have become the trained tasks). A file written
    by hand keeps the flags' meaning: ``tasks`` are the trained tasks."""
    from wmx.train_offline import cli as offline
    saved = {"dataset": "tst@" + "a" * 64, "taskset": {"name": "x"}, "agent": "tdmpc2",
             "seeds": [0], "updates": 6, "preset": "tiny", "agent_overrides": {},
             "tasks": ["reacher-easy"], "train_tasks": ["reacher-easy", "cartpole-balance"],
             "stream": False, "stream_chunk": 50, "devices": 1, "resolved_agent_config": {},
             "training_hash": "y", "code_version": "x"}
    args = parse_with_config(offline.build_parser(),
                             ["--config", _write(tmp_path / "config.json", json.dumps(saved))])
    assert args.tasks == ["reacher-easy", "cartpole-balance"]
    assert args.eval_tasks == ["reacher-easy"]
    hand = {"dataset": "tst@" + "a" * 64, "tasks": ["cartpole-balance"]}
    args = parse_with_config(offline.build_parser(),
                             ["--config", _write(tmp_path / "hand.json", json.dumps(hand))])
    assert args.tasks == ["cartpole-balance"] and args.eval_tasks is None


def test_the_other_trainers_config_is_named_as_such(tmp_path, capsys):
    """train_online --config <an offline run's config.json> (and the reverse) names the
    trainer the file belongs to, in one line (it said "unknown key 'code_version'")."""
    from wmx.train_offline import cli as offline
    off = _write(tmp_path / "off.json", json.dumps({"dataset": "tst@" + "a" * 64,
                                                    "code_version": "x", "updates": 6}))
    on = _write(tmp_path / "on.json", json.dumps(TINY_RC.to_json()))
    for parser, path, other in ((online.build_parser(), off, "train_offline"),
                                (offline.build_parser(), on, "train_online")):
        with pytest.raises(SystemExit) as e:
            parse_with_config(parser, ["--config", path])
        assert e.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"--config {path} is a {other} run's config" in err[0], err
        assert f"pass it to `{other} --config`" in err[0]


@pytest.mark.parametrize("name,text,expected", [
    ("unknown.yaml", "env_step: 5\n", "unknown key 'env_step'; known keys: "),
    ("bad.yaml", "seeds: [0, 1\n", "not valid YAML"),
    ("bad.json", "{\"seeds\": }", "not valid JSON"),
    ("list.yaml", "- 1\n- 2\n", "the top level must be a mapping"),
    ("type.yaml", "seeds: [zero]\n", "seeds: 'zero'"),
    ("switch.yaml", "no_export: maybe\n", "--no-export is a switch"),
    ("count.yaml", "env_steps: 1.5\n", "env_steps: 1.5"),
])
def test_bad_config_is_one_line(tmp_path, capsys, name, text, expected):
    path = _write(tmp_path / name, text)
    with pytest.raises(SystemExit) as e:
        parse_with_config(online.build_parser(), [*BASE, "--config", path])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"train_online: error: --config {path}: "), err
    assert expected in err[0]


def test_missing_file_and_resume(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        online.main([*BASE, "--config", str(tmp_path / "nope.yaml")])
    assert e.value.code == 2
    assert "nope.yaml: no such file" in capsys.readouterr().err
    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps(TINY_RC.to_json()))
    assert online.main(["--resume", str(run), "--config", str(run / "config.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--config does not apply to a resumed run" in err[0]


def test_help_states_precedence(capsys):
    from wmx.evaluate.cli import build_parser as eval_parser
    from wmx.train_offline.cli import build_parser as off_parser
    for p in (online.build_parser(), off_parser()):
        assert " ".join(p.format_help().split()).count(PRECEDENCE) == 1, p.prog
    # evaluate takes no --preset and no agent_overrides: its help names its own keys
    text = " ".join(eval_parser().format_help().split())
    assert "precedence: a flag typed > --config FILE > the defaults" in text
    for trainer_only in ("--preset", "agent_overrides", "env_steps"):
        assert trainer_only not in text, trainer_only


def test_evaluate_config(tmp_path, capsys):
    """evaluate: the file may give the required --run; a typed --runs replaces it."""
    from wmx.evaluate.cli import build_parser
    y = _write(tmp_path / "e.yaml", "run: /x/runs/a\nepisodes: 3\ntasks: [cartpole-balance]\n")
    args = parse_with_config(build_parser(), ["--config", y])
    assert (args.run, args.runs, args.episodes, args.tasks) == ("/x/runs/a", None, 3,
                                                                ["cartpole-balance"])
    args = parse_with_config(build_parser(), ["--config", y, "--runs", "b", "c", "--episodes",
                                              "5", "--out", "o"])
    assert (args.run, args.runs, args.episodes) == (None, ["b", "c"], 5)
    # evaluate trains nothing: agent_overrides is an unknown key there, not ignored
    bad = _write(tmp_path / "b.yaml", "run: /x/runs/a\nagent_overrides: {horizon: 2}\n")
    with pytest.raises(SystemExit):
        parse_with_config(build_parser(), ["--config", bad])
    err = capsys.readouterr().err.strip()
    assert "unknown key 'agent_overrides'" in err and err.count("agent_overrides") == 1
