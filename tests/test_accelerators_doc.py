"""docs/accelerators.md: the files and make targets its "On a GPU" and "On a TPU"
sections name exist, their paper-protocol commands parse into the paper configurations
(no environment is built), the TPU section's versions are the TPU lock's, and the
device_check commands name stages and options the script has."""
from __future__ import annotations

import importlib.util
import re
import shlex
import sys
from pathlib import Path

import pytest

from wmx.train_online import cli

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "accelerators.md"


def section(title: str) -> str:
    """The text of the section ``## title`` (up to the next ``## ``)."""
    text = DOC.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else len(text)]


def paper_commands(s: str) -> dict:
    """{agent: OnlineRunConfig} of the ``train_online`` commands of a section."""
    cmds = [" ".join(c.replace("\\\n", " ").split()) for c in
            re.findall(r"^train_online .*(?:\n(?!\S).*)*", s, re.M)]
    assert len(cmds) == 2, cmds
    got = {}
    for c in cmds:
        rc = cli.config_from_args(cli.build_parser().parse_args(shlex.split(c)[1:]))
        got[rc.agent] = rc
        assert rc.preset == "paper" and rc.task == "walker-walk"
    return got


def check_paper_configs(got: dict) -> None:
    td, dv = got["tdmpc2"].agent_config, got["dreamerv3"].agent_config
    assert td.model_size == 5 and td.num_samples == 512 and got["tdmpc2"].n_envs == 1
    assert dv.model_size == "12m" and dv.train_ratio == 512 and got["dreamerv3"].n_envs == 16
    assert got["dreamerv3"].env_steps == 500_000 and len(got["dreamerv3"].seeds) == 5


def test_gpu_install_names_files_and_make_variables_that_exist():
    s = section("On a GPU")
    for name in ("requirements-lock-cuda12.txt", "tests/test_locks.py", "wmx/envs/playground.py"):
        assert name in s and (ROOT / name).exists(), name
    tool = re.search(r"`(tools/\w+\.py)", s)[1]
    assert (ROOT / tool).exists(), tool
    make = (ROOT / "Makefile").read_text()
    assert "LOCK ?= requirements-lock.txt" in make
    assert "$(LOCK) > $(VENV)/lock-installed.txt" in make     # the lock, less LOCK_SKIP
    assert "lock-cuda12:" in make and "make lock-cuda12" in s
    assert 'impl": "jax"' in (ROOT / "wmx/envs/playground.py").read_text()   # what it says


def test_gpu_paper_protocol_commands_parse_to_the_paper_configs():
    check_paper_configs(paper_commands(section("On a GPU")))


def test_tpu_install_names_files_and_make_targets_that_exist():
    s = section("On a TPU")
    for name in ("requirements-lock-tpu.txt", "tools/lock_accelerator.py", "tests/test_locks.py",
                 "benchmarks/device_check.py", "benchmarks/dreamerv3_speed.py"):
        assert name in s and (ROOT / name).exists(), name
    make = (ROOT / "Makefile").read_text()
    assert "lock-tpu:" in make and "tools/lock_accelerator.py tpu" in make
    assert "make lock-tpu" in s and "make install LOCK=requirements-lock-tpu.txt VENV=.venv-tpu" in s
    lock = (ROOT / "requirements-lock-tpu.txt").read_text()
    libtpu = re.search(r"^libtpu==(\S+)$", lock, re.M)[1]
    jax = re.search(r"^jax==(\S+)$", lock, re.M)[1]
    flat = " ".join(s.split())
    assert f"libtpu {libtpu}" in flat and f"jax {jax}" in flat, (libtpu, jax)
    for dev in ("T13", "W-D3"):            # the deviations it cites exist
        assert f"| {dev} |" in (ROOT / "docs" / "deviations.md").read_text()


def test_tpu_paper_protocol_commands_parse_to_the_paper_configs():
    check_paper_configs(paper_commands(section("On a TPU")))


def test_tpu_speed_table_has_a_row_per_measured_program():
    s = section("On a TPU")
    rows = re.findall(r"^  \| (DreamerV3 12m (?:training|policy) step.*?|TD-MPC2 size 5 .*?) \| "
                      r"(\d) \|", s, re.M)
    dv = {(p.split(" step")[0], int(n)) for p, n in rows if p.startswith("DreamerV3")}
    assert dv == {(f"DreamerV3 12m {k}", n) for k in ("training", "policy") for n in (1, 2, 5)}
    assert sum(p.startswith("TD-MPC2") for p, _ in rows) == 2
    assert "commit a5bf3a1" in s                 # the figures name what they were measured at


def test_device_check_commands_name_its_stages_and_options():
    s = section("The check: `benchmarks/device_check.py`")
    assert (ROOT / "benchmarks/device_check.py").exists()
    spec = importlib.util.spec_from_file_location("device_check",
                                                  ROOT / "benchmarks" / "device_check.py")
    dc = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("device_check", dc)
    spec.loader.exec_module(dc)
    plan = dc.stages(Path("raw"), Path("home"), False, offline_run=Path("run"))
    names = {st.name for st in plan}
    for st in plan:                                # every stage is described
        assert f"`{st.name}`" in s, st.name
    named = set()
    for cmd in re.findall(r"device_check\.py ([^`\n#]*)", DOC.read_text()):
        args = shlex.split(cmd)
        if "--only" in args:
            i = args.index("--only") + 1
            while i < len(args) and not args[i].startswith("--"):
                named.add(args[i])
                i += 1
        parser_opts = {"--plan", "--shared", "--out", "--only", "--dreamerv3-offline-run",
                       "--force-cpu", "--total-s", "--continue"}
        assert {a for a in args if a.startswith("--")} <= parser_opts, cmd
    assert named and named <= names, named - names
    default = [st.name for st in plan if st.default]
    assert default == ["probe", "device_tests", "parity", "tdmpc2_speed",
                       "dreamerv3_speed_f32", "dreamerv3_speed_bf16"]
    assert "570 s" in s and f"{dc.DEFAULT_TOTAL_S:.0f}" == "570"
    assert f"SIGKILL {dc.KILL_GRACE_S:.0f} s later" in s


@pytest.mark.parametrize("option", ["--shared", "--only", "--plan", "--force-cpu",
                                    "--dreamerv3-offline-run", "--total-s"])
def test_device_check_has_the_options_the_page_names(option):
    text = (ROOT / "benchmarks" / "device_check.py").read_text()
    assert f'"{option}"' in text
