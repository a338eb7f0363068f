"""Damaged or unusual inputs a user (or an attacker) hands wmx: each is one clear line, or
is handled and said, and nothing is lost.

- ``--config`` values of the wrong kind (``home: 3``, ``resume: 5``): one line naming
  the key and its type, exit 2.
- metrics.csv cut before ``--resume`` (offline and online): refused in one line naming
  the checkpoint whose rows the file still holds; resumed from there, the run's metrics
  are the uninterrupted run's.
- A damaged checkpoint (host.json cut, a byte of an item flipped): evaluate and
  ``--resume`` name the file and use the newest intact checkpoint; the resumed run
  writes the damaged one again and ends as the uninterrupted run.
- A run reached through a symbolic link ``<home>/runs/linked``: evaluate and
  ``--resume`` take that home (the report keeps its dataset lineage); `wmx runs ls`
  lists a run once and marks the link.
- A cut config.json: `wmx runs info`, evaluate and ``--resume`` give the same one line.

The training cases reuse the session's tiny runs (tests/tiny_runs.py): the online run,
and the offline run on its dataset with stand-in evaluation envs.
"""
from __future__ import annotations

import csv
import json
import logging
import shutil
from pathlib import Path

import pytest

from stand_in_env import stand_in_env
from tiny_runs import TINY_OFFLINE_ARGS, TINY_RC
from wmx.checkpoint import DIGESTS, list_checkpoints, verify_checkpoint
from wmx.cli.main import main as wmx_main

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


# ---- metrics.csv cut before --resume ------------------------------------------------------
def _rows(run_dir: Path, drop=("wall_s",)) -> list[dict]:
    with (run_dir / "metrics.csv").open() as f:
        return [{k: v for k, v in r.items() if k not in drop} for r in csv.DictReader(f)]


def _cut(path: Path, fraction: float) -> None:
    """Keep the first ``fraction`` of the file's bytes (a row may be cut in the middle)."""
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * fraction)])


@pytest.fixture(scope="module")
def offline_runs(tiny_offline_dataset, tmp_path_factory):
    """(home, the uninterrupted tiny offline run) on the tiny dataset, stand-in envs."""
    from wmx.train_offline import loop
    home, _ = tiny_offline_dataset
    work = tmp_path_factory.mktemp("offline-home")
    for sub in ("datasets", "episodes"):
        shutil.copytree(home / sub, work / sub)
    mp = pytest.MonkeyPatch()
    mp.setattr(loop, "cached_env", stand_in_env)
    try:
        assert offline_cli.main(["--dataset", "tst@latest", "--home", str(work), "--name",
                                 "full", *TINY_OFFLINE_ARGS]) == 0
    finally:
        mp.undo()
    return work, work / "runs" / "full"


def test_resume_refuses_metrics_cut_and_the_named_checkpoint_redoes_them(
        offline_runs, monkeypatch, capsys):
    """The issue's case: an interrupted offline run (newest checkpoint at update 4 of 6)
    whose metrics.csv was cut to its first third: --resume refuses and changes nothing
    (an extension neither). Cut after the rows of update 2 instead, the line names that
    checkpoint; resumed from it, the run's metrics are the uninterrupted run's."""
    from wmx.runs.offline_config import OfflineRunConfig
    from wmx.train_offline import loop
    monkeypatch.setattr(loop, "cached_env", stand_in_env)
    home, full = offline_runs
    run_dir = home / "runs" / "cut"
    run_dir.mkdir()
    shutil.copy(full / "config.json", run_dir / "config.json")
    rc = OfflineRunConfig.from_json(json.loads((run_dir / "config.json").read_text()))
    assert not loop.run(rc, run_dir, home=home, progress=False,
                        stop_after_chunks=2)["finished"]
    older, newest = list_checkpoints(run_dir)
    assert (older.name, newest.name) == ("000000000002", "000000000004")
    metrics = run_dir / "metrics.csv"
    whole = metrics.read_text()
    _cut(metrics, 1 / 3)
    head = (f"train_offline: error: {metrics} holds 1 rows up to updates 4 where checkpoint "
            "000000000004 recorded 10: it has lost rows (cut or emptied), and a resume would "
            "not give the uninterrupted run's metrics; ")
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    for extra in ([], ["--updates", "8"]):
        capsys.readouterr()
        assert offline_cli.main(["--resume", str(run_dir), "--no-progress", *extra]) == 2
        (line,) = _lines(capsys.readouterr().err)
        assert line == head + ("put the file back, or start a new run (no checkpoint left "
                               "matches the rows the file holds)"), line
        assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before
    lines = whole.splitlines(keepends=True)          # header, the 2 rows of update 2, ...
    metrics.write_text("".join(lines[:3]) + lines[3][:9])
    assert offline_cli.main(["--resume", str(run_dir), "--no-progress"]) == 2
    (line,) = _lines(capsys.readouterr().err)
    assert line.endswith(f"put the file back, or delete {newest} and resume again: it "
                         "continues from 000000000002, whose 2 rows the file holds, and "
                         "redoes the rest exactly"), line
    shutil.rmtree(newest)                                      # as the line says
    assert offline_cli.main(["--resume", str(run_dir), "--no-progress"]) == 0
    assert _rows(run_dir) == _rows(full)


def test_online_resume_refuses_an_emptied_metrics_csv(tiny_online_run, tmp_path):
    """The same check on train_online: no checkpoint left matches a file emptied to its
    header, so the line says to put the file back or start a new run."""
    from wmx.metrics_csv import MetricsLostError
    from wmx.train_online import loop
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps(TINY_RC.to_json()))
    assert not loop.run(TINY_RC, run_dir, None, progress=False,
                        stop_after_chunks=3)["finished"]
    path = run_dir / "metrics.csv"
    path.write_text(path.read_text().splitlines()[0] + "\n")
    with pytest.raises(MetricsLostError) as e:
        loop.run(TINY_RC, run_dir, None, progress=False)
    msg = str(e.value)                 # 3 rounds x 2 seeds of train rows, 1 evaluation
    assert "holds 0 rows up to agent_steps 60 where checkpoint 000000000063 recorded 8" in msg
    assert msg.endswith("put the file back, or start a new run (no checkpoint left matches "
                        "the rows the file holds)") and "\n" not in msg
    assert path.read_text().count("\n") == 1


# ---- damaged checkpoints ------------------------------------------------------------------
def test_evaluate_names_a_damaged_host_json_and_uses_the_older_checkpoint(
        tiny_online_run, tmp_path, caplog, capsys):
    _, _, full, _ = tiny_online_run
    run_dir = tmp_path / "runs" / "r"
    shutil.copytree(full, run_dir)
    older, newest = list_checkpoints(run_dir)
    (newest / "host.json").write_text('{"eval_index": 3, "fin')
    with caplog.at_level(logging.WARNING):
        assert evaluate_cli.main(["--run", str(run_dir), "--episodes", "1"]) == 0
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warning == (f"{newest / 'host.json'} is not valid JSON (Unterminated string "
                       "starting at: line 1 column 19 (char 18)): using the older checkpoint "
                       f"{older.name}")
    report = json.loads((run_dir / "report" / "report.json").read_text())
    assert report["run"]["checkpoint"] == str(older)


def test_resume_skips_a_checkpoint_with_a_flipped_byte_and_writes_it_again(
        tiny_online_run, tmp_path, caplog):
    """orbax restores a data file with a flipped byte without a word: the digest written
    with the checkpoint finds it; the run resumes from the older checkpoint, writes the
    damaged one again and ends with the uninterrupted run's metrics."""
    from wmx.train_online import loop
    _, _, full, _ = tiny_online_run
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps(TINY_RC.to_json()))
    assert not loop.run(TINY_RC, run_dir, None, progress=False,
                        stop_after_chunks=4)["finished"]
    older, newest = list_checkpoints(run_dir)
    assert (newest / DIGESTS).is_file()
    data = max((f for f in (newest / "items" / "agent").rglob("*") if f.is_file()),
               key=lambda f: f.stat().st_size)
    b = bytearray(data.read_bytes())
    b[len(b) // 2] ^= 0x01
    data.write_bytes(bytes(b))
    with caplog.at_level(logging.WARNING):
        assert loop.run(TINY_RC, run_dir, None, progress=False)["finished"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [f"checkpoint file {data} does not match the digest written with it "
                        f"(changed or cut on disk): using the older checkpoint {older.name}"]
    assert _rows(run_dir) == _rows(full)
    for c in list_checkpoints(run_dir):
        verify_checkpoint(c)                              # every checkpoint intact again


# ---- a run reached through a symbolic link -----------------------------------------------
def test_a_linked_run_takes_its_links_home_and_is_listed_once(offline_runs, tmp_path,
                                                               monkeypatch, caplog, capsys):
    """``<home>/runs/linked`` -> a run kept elsewhere: evaluate reads the dataset lineage in
    that home (not $WMX_HOME's), --resume takes that home; `wmx runs ls` lists the run
    kept in runs/ once, with the link to it, and marks the link to the run elsewhere."""
    import wmx.envs.playground as playground
    from wmx.runs.cli_common import resume_config
    home, full = offline_runs
    monkeypatch.setattr(playground, "cached_env", stand_in_env)
    monkeypatch.setenv("WMX_HOME", str(tmp_path / "default-home"))
    elsewhere = tmp_path / "disk" / "kept"
    shutil.copytree(full, elsewhere, ignore=shutil.ignore_patterns("report"))
    linked, alias = home / "runs" / "linked", home / "runs" / "alias"
    linked.symlink_to(elsewhere)
    alias.symlink_to(full)
    try:
        with caplog.at_level(logging.WARNING):
            assert evaluate_cli.main(["--run", str(linked), "--episodes", "1"]) == 0
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
        lineage = json.loads((elsewhere / "report" / "report.json").read_text())["lineage"]
        assert lineage["home"] == str(home) and lineage["dataset_found"]
        assert lineage["sources"] and lineage["dataset_path"].startswith(str(home))
        _, _, got = resume_config(str(linked), None, tmp_path / "default-home",
                                  "train_offline")
        assert got == home
        capsys.readouterr()
        assert wmx_main(["runs", "ls", "--home", str(home)]) == 0
        names = [ln.split("  ")[0] for ln in capsys.readouterr().out.splitlines()[1:]]
        assert {"full (also linked as alias)", f"linked -> {elsewhere}"} <= set(names)
        assert not {"full", "alias", "linked"} & set(names)       # each run once
    finally:
        linked.unlink()
        alias.unlink()


# ---- a cut config.json --------------------------------------------------------------------
def test_a_cut_config_json_is_the_same_one_line_everywhere(tiny_online_run, tmp_path,
                                                           capsys):
    _, _, full, _ = tiny_online_run
    run_dir = tmp_path / "runs" / "r"
    shutil.copytree(full, run_dir)
    cfg = run_dir / "config.json"
    cfg.write_text(cfg.read_text()[:40])
    said = (f"{cfg} is not valid JSON (", "): the run directory is damaged (its config cannot "
            "be rebuilt); put config.json back from a copy, or start a new run")
    for argv, main, prefix in (
            (["runs", "info", str(run_dir)], wmx_main, "error: "),
            (["--run", str(run_dir)], evaluate_cli.main, "evaluate: error: "),
            (["--resume", str(run_dir)], online_cli.main, "train_online: error: --resume: ")):
        capsys.readouterr()
        assert main(argv) == 2
        out = capsys.readouterr()
        (line,) = _lines(out.err)
        assert line.startswith(prefix + said[0]) and line.endswith(said[1]), line
        assert out.out == ""
    (run_dir / "config.json").write_text((full / "config.json").read_text())
    host = list_checkpoints(run_dir)[-1] / "host.json"
    host.write_text(host.read_text()[:5])                   # a damaged checkpoint: listed
    assert wmx_main(["runs", "info", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "  checkpoints (2):" in out and (
        f"    {host.parent.name}: damaged, its host.json is not valid JSON (") in out
