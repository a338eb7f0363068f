"""Damaged or unusual inputs a user (or an attacker) hands wmx: each is one clear line, or
is handled and said, and nothing is lost.

- ``--config`` values of the wrong kind (``home: 3``, ``resume: 5``): one line naming
  the key and its type, exit 2.
"""
from __future__ import annotations

import pytest

from wmx.evaluate import cli as evaluate_cli
from wmx.train_offline import cli as offline_cli
from wmx.train_online import cli as online_cli

MAINS = {"train_online": online_cli.main, "train_offline": offline_cli.main,
         "evaluate": evaluate_cli.main}


def _status(prog: str, argv: list[str]) -> int:
    """The exit status of ``prog``'s main (which returns it, or raises SystemExit)."""
    try:
        return MAINS[prog](argv)
    except SystemExit as e:
        return int(e.code)


def _lines(err: str) -> list[str]:
    """stderr without log lines (they start with a date)."""
    return [ln for ln in err.strip().splitlines() if ln and not ln[:4].isdigit()]


# ---- --config values of the wrong kind -----------------------------------------------------
CONFIG_CASES = [
    # (id, program, file text, flags typed, expected text)
    ("online-home-int", "train_online", "home: 3\n", ["--task", "probe-action"],
     "home: --home takes a path (a string), got 3 (an integer)"),
    ("online-resume-int", "train_online", "resume: 5\n", [],
     "resume: --resume takes a path (a string), got 5 (an integer)"),
    ("offline-resume-float", "train_offline", "resume: 2.5\n", [],
     "resume: --resume takes a path (a string), got 2.5 (a number)"),
    ("evaluate-home-int", "evaluate", "home: 3\n", ["--run", "somewhere"],
     "home: --home takes a path (a string), got 3 (an integer)"),
    ("evaluate-runs-int", "evaluate", "runs: [a, 5]\nout: x\n", [],
     "runs: --runs takes a path (a string), got 5 (an integer)"),
]


@pytest.mark.parametrize("case", CONFIG_CASES, ids=[c[0] for c in CONFIG_CASES])
def test_config_value_of_the_wrong_kind_is_one_line(case, tmp_path, capsys, monkeypatch):
    _, prog, text, flags, expected = case
    monkeypatch.chdir(tmp_path)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    assert _status(prog, ["--config", str(cfg), *flags]) == 2
    (line,) = _lines(capsys.readouterr().err)
    assert line == f"{prog}: error: --config {cfg}: {expected}" + (
        "; write the path, in quotes where it looks like a number" if "path" in expected
        else ""), line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml"]
