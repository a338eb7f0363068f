"""`evaluate` end to end on a tiny online run (probe env), run comparison and bad input.

The run is conftest.py's `tiny_online_run` (tiny preset, probe-action, T=20,
seeds 0 and 3), trained once per session and shared with tests/train_online;
every evaluation uses 2 episodes, the run's own count, so the rollout program
the trainer compiled is reused.
"""
import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tiny_runs import T
from wmx.evaluate import cli


@pytest.fixture(scope="module")
def trained(tiny_online_run):
    home, _, run_dir, _ = tiny_online_run
    return home, run_dir


def _listing(root):
    return sorted(str(p.relative_to(root)) for p in Path(root).rglob("*"))


def test_evaluate_run_writes_a_report(trained, capsys):
    home, run_dir = trained
    assert cli.main(["--run", run_dir, "--episodes", 2, "--home", home]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [str(run_dir / "report" / "report.md")]
    rep = json.loads((run_dir / "report" / "report.json").read_text())
    assert rep["run"]["kind"] == "online" and rep["run"]["env_steps"] == 6 * T
    assert rep["run"]["updates"] is None        # online updates are per seed, not in host.json
    assert rep["evaluation"]["keys"] == "fresh" and rep["evaluation"]["episodes"] == 2
    (row,) = rep["per_task"]
    rets = np.array([rep["returns"]["probe-action"][s] for s in ("0", "3")])
    assert rets.shape == (2, 2) and np.all(np.abs(rets) <= T)   # reward = action[0] in [-1, 1]
    assert row["return_mean"] == pytest.approx(rets.mean())
    assert row["score"] == pytest.approx(rets.mean() / 10)
    assert row["published_return"] is None                       # no published probe curve
    sets = rep["lineage"]["episode_sets"]
    assert [s["seed"] for s in sets] == [0, 3] and all(len(s["content_hash"]) == 64
                                                         for s in sets)
    md = (run_dir / "report" / "report.md").read_text()
    assert "probe-action" in md and sets[0]["content_hash"][:12] in md
    assert "(one task: none at all)" in md          # an interval over one task is no interval
    # which evaluation this is, and the trainer's own one at the checkpoint beside it
    assert "(rollout keys: fresh, index 0: the evaluate command's own draw" in md
    trainer = rep["evaluation"]["trainer"]
    summary = json.loads((run_dir / "summary.json").read_text())
    final = np.mean([np.mean(v) for v in summary["final_eval"].values()])
    assert (trainer["step"], trainer["episodes"], trainer["seeds"]) == (6 * T, 2, 2)
    assert trainer["return"] == {"probe-action": pytest.approx(final)}
    assert (f"The trainer's own evaluation at this checkpoint (metrics.csv): 2 episodes per "
            f"seed and task, mean return probe-action {final:.1f}; mean score") in md
    assert "(the run's own)" in md and "no env step of its own" not in md
    assert (run_dir / "report" / "learning_curves.png").stat().st_size > 0


def test_checkpoint_keys_repeat_the_trainers_final_evaluation(trained, tmp_path, capsys):
    home, run_dir = trained
    out = tmp_path / "ck"
    assert cli.main(["--run", run_dir, "--episodes", 2, "--seeds-from-checkpoint",
                     "--out", out]) == 0
    rep = json.loads((out / "report.json").read_text())
    # evaluations at 2T, 4T, 6T: the final one has index 2
    assert rep["evaluation"]["keys"] == "checkpoint" and rep["evaluation"]["eval_index"] == 2
    summary = json.loads((run_dir / "summary.json").read_text())
    assert rep["returns"]["probe-action"] == summary["final_eval"]   # bit-identical episodes
    (row,) = rep["per_task"]                        # so the report's return is the trainer's
    assert rep["evaluation"]["trainer"]["return"]["probe-action"] == \
        pytest.approx(row["return_mean"])
    assert "these are the trainer's episodes again" in (out / "report.md").read_text()
    with (run_dir / "metrics.csv").open() as f:
        evals = [r for r in csv.DictReader(f) if r["kind"] == "eval"]
    for r in evals[-2:]:
        episodes = rep["returns"]["probe-action"][r["seed"]]
        assert float(r["return"]) == pytest.approx(np.mean(episodes))


def test_bad_input_exits_2_and_writes_nothing(trained, tmp_path, capsys):
    home, run_dir = trained
    before = _listing(home)
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(run_dir / "config.json", bare / "config.json")
    cases = [
        (["--run", tmp_path / "nope"], f"{tmp_path / 'nope'} is not a run directory"),
        (["--run", "no-such-run", "--home", home],
         "neither " + str(home / "runs" / "no-such-run") + " nor no-such-run"),
        (["--run", bare], "no checkpoint"),
        (["--run", tmp_path], "no config.json"),
        (["--run", run_dir, "--tasks", "walker-wlak"], "walker-wlak"),
        (["--run", run_dir, "--tasks", "cartpole-balance"], "not in run"),
        (["--run", run_dir, "--episodes", 0], "--episodes must be >= 1"),
        (["--run", run_dir, "--out", tmp_path / "x", "--episodes", -3], "--episodes"),
        (["--runs", run_dir, run_dir], "needs --out"),
        (["--runs", run_dir, run_dir, "--out", tmp_path / "cmp"], "more than once"),
        (["--runs", run_dir, tmp_path / "nope", "--out", tmp_path / "cmp"], "is not a run directory"),
        (["--run", run_dir, "--runs", run_dir], "not allowed with"),
    ]
    for argv, msg in cases:
        assert cli.main(argv) == 2, argv
        assert msg in capsys.readouterr().err, (argv, msg)
    assert _listing(home) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bare"]
    assert _listing(bare) == ["config.json"]


def test_existing_report_needs_force(trained, capsys):
    home, run_dir = trained
    if not (run_dir / "report").exists():
        assert cli.main(["--run", run_dir, "--episodes", 2]) == 0
    before = (run_dir / "report" / "report.json").read_text()
    assert cli.main(["--run", run_dir, "--episodes", 2]) == 2
    assert "--force" in capsys.readouterr().err
    # by its name under <home>/runs, as train_online --resume takes it: the same run
    assert run_dir.parent == Path(home) / "runs"
    assert cli.main(["--run", run_dir.name, "--episodes", 2, "--home", home]) == 2
    assert f"{run_dir / 'report'}" in capsys.readouterr().err
    assert (run_dir / "report" / "report.json").read_text() == before
    assert cli.main(["--run", run_dir, "--episodes", 2, "--force"]) == 0
    assert json.loads((run_dir / "report" / "report.json").read_text())["per_task"] == \
        json.loads(before)["per_task"]                    # same keys: the same episodes


def test_compare_runs_evaluates_a_run_without_report(trained, tmp_path, capsys):
    home, run_dir = trained
    if not (run_dir / "report").exists():
        assert cli.main(["--run", run_dir, "--episodes", 2]) == 0
    other = home / "runs" / "tiny-copy"
    shutil.copytree(run_dir, other, ignore=shutil.ignore_patterns("report"))
    out = tmp_path / "cmp"
    assert cli.main(["--runs", run_dir, other, "--out", out, "--episodes", 2]) == 0
    assert capsys.readouterr().out.strip() == str(out / "compare.md")
    assert (other / "report" / "report.json").is_file()
    with (out / "per_task.csv").open() as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["task", "tiny", "tiny-copy", "source_return", "tiny_ratio",
                       "tiny-copy_ratio"] and rows[1][0] == "probe-action"
    assert rows[1][1] == rows[1][2]                         # same checkpoint, same keys
    assert rows[1][3:] == ["", "", ""]                      # online runs: no source
    c = json.loads((out / "compare.json").read_text())
    assert [a["statistic"] for a in c["aggregates"]["tiny"]] == ["mean", "median", "iqm"]
    assert sorted(p.name for p in out.iterdir()) == ["aggregates.csv", "compare.json",
                                                     "compare.md", "per_task.csv", "scores.png"]


def test_help_exits_0(capsys):
    assert cli.main(["--help"]) == 0
    text = capsys.readouterr().out
    assert "--seeds-from-checkpoint" in text and "report.md" in text
