"""benchmarks/profile_step.py's command line: bad input exits 2 with a one-line message,
the defaults fill in (``--program online`` too), and the docs' TPU commands parse."""
import re
import shlex
import subprocess
import sys

import pytest

from profile_step_common import SCRIPT, _env, ps


# ---- the command line -----------------------------------------------------------------
def test_bad_seeds_exit_2_with_one_line(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "--seeds", "0", "--out",
                        str(tmp_path / "o")], capture_output=True, text=True, env=_env(),
                       timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == ["profile_step.py: error: --seeds 0: must be at least 1"]
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("argv, words", [
    (["--calls", "0"], "--calls 0: must be at least 1"),
    (["--agent", "tdmpc2", "--program", "train"], "tdmpc2 has update, plan and online"),
    (["--agent", "tdmpc2", "--compute-dtype", "bfloat16"], "TD-MPC2 computes in float32"),
    (["--size", "3m"], "dreamerv3 sizes are 1m, 12m"),
    (["--agent", "tdmpc2", "--size", "2"], "tdmpc2 sizes are 1, 5"),
    (["--seeds", "two"], "invalid int value"),
    ([], "the following arguments are required: --out"),
])
def test_bad_input_is_refused_in_one_line(argv, words, capsys, tmp_path):
    out = [] if argv == [] else ["--out", str(tmp_path / "o")]
    with pytest.raises(SystemExit) as e:
        ps.parse_args([*argv, *out])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.splitlines()) == 1 and words in err, err
    assert not (tmp_path / "o").exists()


def test_help_names_the_options_and_the_defaults_fill_in(capsys, tmp_path):
    with pytest.raises(SystemExit) as e:
        ps.parse_args(["--help"])
    text = capsys.readouterr().out
    assert e.value.code == 0
    for opt in ("--agent", "--program", "--size", "--seeds", "--compute-dtype", "--calls",
                "--out", "--peak-tflops"):
        assert opt in text, opt
    a = ps.parse_args(["--agent", "tdmpc2", "--out", str(tmp_path)])
    assert (a.program, a.size, a.seeds, a.compute_dtype) == ("update", 1, 1, "float32")
    a = ps.parse_args(["--out", str(tmp_path)])
    assert (a.agent, a.program, a.size) == ("dreamerv3", "train", "1m")


def test_the_tpu_commands_in_the_docs_parse(tmp_path):
    doc = (SCRIPT.parents[1] / "docs" / "performance.md").read_text()
    doc = doc.replace("\\\n", " ")                  # a command continued over lines
    cmds = re.findall(r"^python benchmarks/profile_step\.py (.*--out DIR.*)$", doc, re.M)
    parsed = [ps.parse_args(shlex.split(c.replace("DIR", str(tmp_path)))) for c in cmds]
    assert sorted((a.agent, a.program, a.size, a.seeds, a.compute_dtype, a.task, a.preset)
                  for a in parsed) == [
        ("dreamerv3", "online", "12m", 5, "bfloat16", "walker-walk", "paper"),
        ("dreamerv3", "train", "12m", 5, "bfloat16", None, None),
        ("tdmpc2", "online", 5, 5, "float32", "walker-walk", "paper"),
        ("tdmpc2", "update", 5, 5, "float32", None, None)]
    # the same commands stand in the script's --help
    usage = " ".join(ps.__doc__.replace("\\\n", " ").split())
    assert all(" ".join(c.split()) in usage for c in cmds)


@pytest.mark.parametrize("argv, words", [
    (["--task", "walker-walk"], "--task walker-walk: only for --program online"),
    (["--agent", "tdmpc2", "--preset", "paper"], "--preset paper: only for --program online"),
    (["--episode-length", "50"], "--episode-length 50: only for --program online"),
    (["--program", "online", "--preset", "huge"], "dreamerv3 presets are paper, cpu, tiny"),
    (["--program", "online", "--task", "walker-crawl"], "unknown task 'walker-crawl'"),
    (["--program", "online", "--episode-length", "3"], "--episode-length 3: must be at least 4"),
    (["--program", "online", "--size", "1m"], "--preset paper runs size 12m (drop --size"),
    (["--agent", "tdmpc2", "--program", "online", "--size", "1"],
     "--preset paper runs size 5"),
    (["--agent", "tdmpc2", "--program", "online", "--preset", "tiny", "--size", "5"],
     "--preset tiny has widths of its own, no named size (drop --size)"),
])
def test_online_flags_are_refused_in_one_line(argv, words, tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), *argv, "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, env=_env(), timeout=120)
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1, r.stderr
    assert r.stderr.startswith("profile_step.py: error: ") and words in r.stderr, r.stderr
    assert not (tmp_path / "o").exists()


def test_online_defaults_fill_in(tmp_path):
    a = ps.parse_args(["--agent", "tdmpc2", "--program", "online", "--out", str(tmp_path)])
    assert (a.task, a.preset, a.size, a.episode_length) == ("walker-walk", "paper", 5, None)
    a = ps.parse_args(["--program", "online", "--preset", "cpu", "--size", "1m", "--out",
                       str(tmp_path)])
    assert (a.task, a.preset, a.size) == ("walker-walk", "cpu", "1m")
    a = ps.parse_args(["--program", "online", "--preset", "tiny", "--out", str(tmp_path)])
    assert a.size is None
