"""README's "On a GPU" section: its files exist and its paper-protocol commands parse
into the paper configurations (no environment is built)."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

from wmx.train_online import cli

ROOT = Path(__file__).resolve().parents[1]


def section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("\n## On a GPU\n")
    return text[start:text.index("\n## ", start + 1)]


def test_install_names_files_and_make_variables_that_exist():
    s = section()
    for name in ("requirements-lock-cuda12.txt", "tools/lock_cuda12.py",
                 "benchmarks/gpu_check.py", "tests/test_locks.py", "wmx/envs/playground.py"):
        assert name in s and (ROOT / name).exists(), name
    make = (ROOT / "Makefile").read_text()
    assert "LOCK ?= requirements-lock.txt" in make
    assert "$(LOCK) > $(VENV)/lock-installed.txt" in make     # the lock, less LOCK_SKIP
    assert "lock-cuda12:" in make
    assert 'impl": "jax"' in (ROOT / "wmx/envs/playground.py").read_text()   # what it says


def test_paper_protocol_commands_parse_to_the_paper_configs():
    cmds = [" ".join(c.replace("\\\n", " ").split()) for c in
            re.findall(r"^train_online .*(?:\n(?!\S).*)*", section(), re.M)]
    assert len(cmds) == 2, cmds
    got = {}
    for c in cmds:
        args = cli.build_parser().parse_args(shlex.split(c)[1:])
        rc = cli.config_from_args(args)
        got[rc.agent] = rc
        assert rc.preset == "paper" and rc.task == "walker-walk"
    td, dv = got["tdmpc2"].agent_config, got["dreamerv3"].agent_config
    assert td.num_samples == 512 and got["tdmpc2"].n_envs == 1
    assert dv.model_size == "12m" and dv.train_ratio == 512 and got["dreamerv3"].n_envs == 16
    assert got["dreamerv3"].env_steps == 500_000 and len(got["dreamerv3"].seeds) == 5
