"""`evaluate --runs` over runs that already have reports: which tasks each run covers,
which reports may be reused, and where the comparison may be written.

The runs are fakes: a run directory holding only report/report.json (the fields a
comparison reads) and, where a test needs one, an empty checkpoint folder; nothing
is evaluated, so no JAX program is compiled.
"""
import json
import logging
from pathlib import Path

import pytest

from tiny_runs import TINY_RC
from wmx.evaluate import aggregates as agg
from wmx.evaluate import cli
from wmx.evaluate import runs as eval_runs
from wmx.evaluate.compare import build_comparison, ratio_summary
from wmx.evaluate.report import REPORT_SCHEMA


def fake_run(root: Path, name: str, scores: dict[str, float], *, episodes: int = 2,
             keys: str = "fresh", step: int = 6, newest: int | None = None,
             sources: dict[str, float | None] | None = None) -> Path:
    """root/<name> with a report of ``scores`` (task -> score) made with ``episodes`` per
    seed, ``keys`` rollout keys at checkpoint ``step``; ``newest``: also a checkpoint
    folder of that step (host.json only); ``sources``: task -> the sources' final return,
    with each row's return_mean (score x 10). Returns the run directory."""
    run_dir = root / name
    (run_dir / "report").mkdir(parents=True)
    report = {
        "schema": REPORT_SCHEMA, "created": "2026-01-01T00:00:00+0000",
        "run": {"dir": str(run_dir), "name": name, "kind": "offline", "checkpoint_step": step},
        "evaluation": {"episodes": episodes, "keys": keys, "eval_index": 0, "seeds": [0, 1]},
        "per_task": [{"task": t, "score": s} if sources is None else
                     {"task": t, "score": s, "return_mean": 10 * s,
                      "source_return": sources.get(t)} for t, s in scores.items()],
        "aggregates": [{"who": "wmx", **a.to_dict()}
                       for a in agg.aggregate_all(list(scores.values()))]}
    (run_dir / "report" / "report.json").write_text(json.dumps(report))
    if newest is not None:
        ckpt = run_dir / "checkpoints" / f"{newest:012d}"
        ckpt.mkdir(parents=True)
        (ckpt / "host.json").write_text("{}")
    return run_dir


def _listing(root):
    return sorted(str(p.relative_to(root)) for p in Path(root).rglob("*"))


def test_runs_without_a_common_task_are_refused(tmp_path, capsys):
    a = fake_run(tmp_path, "a", {"cartpole-balance": 50.0})
    b = fake_run(tmp_path, "b", {"cheetah-run": 20.0})
    before = _listing(tmp_path)
    assert cli.main(["--runs", a, b, "--out", tmp_path / "cmp", "--episodes", 2]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "no task in common" in err and "a: cartpole-balance; b: cheetah-run" in err
    assert _listing(tmp_path) == before                    # no comparison, no temporary
    # a third run sharing a task with one of them: only the run sharing none is refused
    c = fake_run(tmp_path, "c", {"cartpole-balance": 60.0, "walker-walk": 30.0})
    assert cli.main(["--runs", a, b, c, "--out", tmp_path / "cmp", "--episodes", 2]) == 2
    assert "b shares no task with the other runs" in capsys.readouterr().err
    assert not (tmp_path / "cmp").exists()
    reports = [json.loads((r / "report" / "report.json").read_text()) for r in (a, b)]
    with pytest.raises(ValueError, match="no task in common"):
        build_comparison(reports)                           # the library refuses it too


def test_partly_shared_tasks_show_which_run_lacks_which(tmp_path, capsys, caplog):
    a = fake_run(tmp_path, "a", {"cartpole-balance": 50.0, "cheetah-run": 20.0})
    b = fake_run(tmp_path, "b", {"cartpole-balance": 40.0})
    out = tmp_path / "cmp"
    with caplog.at_level(logging.WARNING, logger="wmx.evaluate"):
        assert cli.main(["--runs", a, b, "--out", out, "--episodes", 2]) == 0
    assert any("b has no evaluation of cheetah-run" in r.getMessage() for r in caplog.records)
    c = json.loads((out / "compare.json").read_text())
    assert c["missing"] == {"a": [], "b": ["cheetah-run"]}
    md = (out / "compare.md").read_text()
    assert "| cheetah-run | 20.0 | not evaluated |" in md
    assert "| cartpole-balance | 50.0 | 40.0 |" in md
    assert "b lacks cheetah-run" in md
    # like for like: aggregates over cartpole-balance alone beside each run's own
    assert c["common_tasks"] == ["cartpole-balance"]
    common = {lab: {a["statistic"]: a["value"] for a in rows}
              for lab, rows in c["common_aggregates"].items()}
    assert common == {"a": {"mean": 50.0, "median": 50.0, "iqm": 50.0},
                      "b": {"mean": 40.0, "median": 40.0, "iqm": 40.0}}
    own_a = {x["statistic"]: x["value"] for x in c["aggregates"]["a"]}
    assert own_a["mean"] == 35.0                          # (50 + 20) / 2, over a's two tasks
    assert "## Aggregates over the tasks every run scored" in md
    assert "1 task: cartpole-balance." in md
    assert "The first aggregates below are over the tasks every run scored" in md
    rows = (out / "aggregates.csv").read_text().splitlines()
    assert rows[0] == "run,tasks,statistic,value,ci_low,ci_high,n_tasks"
    assert "a,common,mean,50.0,50.0,50.0,1" in rows and "a,own,mean,35.0" in "\n".join(rows)


def test_runs_over_the_same_tasks_have_no_separate_common_aggregates(tmp_path):
    """When every run scored the same tasks, its own aggregates are the like-for-like ones."""
    a = fake_run(tmp_path, "a", {"cartpole-balance": 50.0, "cheetah-run": 20.0})
    b = fake_run(tmp_path, "b", {"cheetah-run": 30.0, "cartpole-balance": 40.0})
    reports = [json.loads((r / "report" / "report.json").read_text()) for r in (a, b)]
    c = build_comparison(reports)
    assert c["common_aggregates"] == {} and c["common_tasks"] == ["cartpole-balance",
                                                                    "cheetah-run"]


def test_a_report_of_another_evaluation_is_not_reused(tmp_path, capsys):
    a = fake_run(tmp_path, "a", {"cartpole-balance": 50.0}, episodes=10)
    b = fake_run(tmp_path, "b", {"cartpole-balance": 40.0}, episodes=10)
    before = _listing(tmp_path)
    out = tmp_path / "cmp"
    # the default --episodes (10) matches; 2 does not, for either run
    assert cli.main(["--runs", a, b, "--out", out, "--episodes", 2]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"{a}/report has 10 episodes, not the 2 asked" in err and f"{b}/report" in err
    assert "--episodes 2 --force" in err and "own evaluation: --episodes 10" in err
    assert _listing(tmp_path) == before
    # episode counts that differ between the runs: no common count to offer
    c = fake_run(tmp_path, "c", {"cartpole-balance": 45.0}, episodes=3)
    assert cli.main(["--runs", a, c, "--out", out, "--episodes", 10]) == 2
    err = capsys.readouterr().err
    assert f"{c}/report has 3 episodes, not the 10 asked" in err and f"{a}/report" not in err
    assert f"`evaluate --run {c} --episodes 10 --force`" in err and "own evaluation" not in err
    # no --episodes: the reports' own count when they agree, else the default 10
    g = fake_run(tmp_path, "g", {"cartpole-balance": 35.0}, episodes=3)
    assert cli.main(["--runs", c, g, "--out", tmp_path / "cg"]) == 0
    assert "| c | tdmpc2 | offline | 6 | 3 x 2 | fresh |" in (tmp_path / "cg" / "compare.md").read_text()
    assert cli.main(["--runs", a, c, "--out", out]) == 2
    assert f"{c}/report has 3 episodes, not the 10 asked" in capsys.readouterr().err
    # another key stream, or a checkpoint older than the run's newest
    d = fake_run(tmp_path, "d", {"cartpole-balance": 45.0}, episodes=10, keys="checkpoint")
    assert cli.main(["--runs", a, d, "--out", out]) == 2
    assert "checkpoint rollout keys, not the fresh ones asked" in capsys.readouterr().err
    e = fake_run(tmp_path, "e", {"cartpole-balance": 45.0}, episodes=10, step=4, newest=6)
    assert cli.main(["--runs", a, e, "--out", out]) == 2
    err = capsys.readouterr().err
    assert "checkpoint 4, not the run's newest 6" in err and "own evaluation" not in err
    assert not out.exists()
    # what was asked: reused, and the runs table says how each run was evaluated
    f = fake_run(tmp_path, "f", {"cartpole-balance": 45.0}, episodes=10, step=6, newest=6)
    assert cli.main(["--runs", a, f, "--out", out]) == 0
    md = (out / "compare.md").read_text()
    assert "| a | tdmpc2 | offline | 6 | 10 x 2 | fresh |" in md and "| f | tdmpc2 | offline | 6 | 10 x 2 |" in md


def test_unwritable_out_is_refused_before_evaluating(tmp_path, capsys, monkeypatch):
    """A read-only --out fails first, naming --out (it used to fail after evaluating,
    blaming --home). As root, permission bits do not stop writes: os.access is faked."""
    ro = tmp_path / "ro"
    ro.mkdir()
    real = cli.os.access
    monkeypatch.setattr(cli.os, "access", lambda p, mode: Path(p) != ro and real(p, mode))

    def no_evaluation(*a, **k):
        raise AssertionError("evaluated before --out was checked")

    monkeypatch.setattr(eval_runs, "evaluate_run", no_evaluation)
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints" / "000000000120").mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps(TINY_RC.to_json()))
    (run_dir / "checkpoints" / "000000000120" / "host.json").write_text('{"next_tick": 126}')
    assert cli.main(["--run", run_dir, "--out", ro / "rep", "--episodes", 2]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and "not a writable folder" in err and "--home" not in err
    a = fake_run(tmp_path, "a", {"cartpole-balance": 50.0})
    b = fake_run(tmp_path, "b", {"cartpole-balance": 40.0})
    assert cli.main(["--runs", a, b, "--out", ro / "deeper" / "cmp", "--episodes", 2]) == 2
    assert "--out" in capsys.readouterr().err
    assert _listing(ro) == []


def _unscored(run_dir: Path, *tasks: str) -> dict:
    """The report of ``run_dir`` with ``tasks`` scored None (a non-finite mean return, as
    report.json stores it) and its aggregates over the tasks left, as `report` makes them."""
    path = run_dir / "report" / "report.json"
    report = json.loads(path.read_text())
    for row in report["per_task"]:
        if row["task"] in tasks:
            row["score"] = None
    left = [row["score"] for row in report["per_task"] if row["score"] is not None]
    report["aggregates"] = [{"who": "wmx", **a.to_dict()}
                            for a in agg.aggregate_all(left)] if left else []
    path.write_text(json.dumps(report))
    return report


def test_a_task_one_run_did_not_score_is_left_out_of_the_common_aggregates(tmp_path):
    a = fake_run(tmp_path, "a", {"cartpole-balance": 50.0, "cheetah-run": 20.0})
    b = fake_run(tmp_path, "b", {"cartpole-balance": 40.0, "cheetah-run": 30.0})
    c = build_comparison([_unscored(a, "cartpole-balance"),
                          json.loads((b / "report" / "report.json").read_text())])
    assert c["common_tasks"] == ["cheetah-run"]
    assert {lab: [x["value"] for x in rows if x["statistic"] == "mean"]
            for lab, rows in c["common_aggregates"].items()} == {"a": [20.0], "b": [30.0]}


def test_a_non_finite_score_is_compared_as_none(tmp_path):
    """As build_comparison's doc says: a hand-edited report's inf or NaN score is None in
    the comparison (left out of the common tasks), so compare.json stays valid JSON."""
    a = fake_run(tmp_path, "a", {"cartpole-balance": 50.0, "cheetah-run": 20.0})
    b = fake_run(tmp_path, "b", {"cartpole-balance": 40.0, "cheetah-run": 30.0})
    ra = json.loads((a / "report" / "report.json").read_text())
    ra["per_task"][0]["score"] = float("inf")
    rb = json.loads((b / "report" / "report.json").read_text())
    rb["per_task"][1]["score"] = float("nan")
    c = build_comparison([ra, rb])
    assert c["scores"] == {"a": {"cartpole-balance": None, "cheetah-run": 20.0},
                           "b": {"cartpole-balance": 40.0, "cheetah-run": None}}
    assert c["common_tasks"] == []
    json.dumps(c, allow_nan=False)


def test_a_run_without_a_finite_score_is_compared_without_aggregates(tmp_path):
    a = fake_run(tmp_path, "a", {"cartpole-balance": 50.0})
    b = fake_run(tmp_path, "b", {"cartpole-balance": 40.0})
    _unscored(a, "cartpole-balance")
    out = tmp_path / "cmp"
    assert cli.main(["--runs", a, b, "--out", out, "--episodes", 2]) == 0
    md = (out / "compare.md").read_text()
    assert "| cartpole-balance | - | 40.0 |" in md
    assert "| a | 0 | - | - | - |" in md and "| b | 1 | 40.0 [40.0, 40.0] |" in md


def test_ratio_summary_counts_the_learned_tasks_at_the_share():
    """Only the tasks whose source learned count; those it did not, or where that is
    unknown, are listed as left out."""
    ratios = {"a": 0.8, "b": 0.7999, "c": None, "d": 1.3, "e": 0.1, "f": 2.0}
    learned = {"a": True, "b": True, "c": True, "d": True, "e": False, "f": None}
    s = ratio_summary(ratios, learned)
    assert {k: v for k, v in s.items() if k != "over"} == {
        "at_least": 0.8, "reached": 2, "total": 3, "share": pytest.approx(2 / 3),
        "below": ["b"], "not_learned": ["e"], "learned_unknown": ["f"]}
    assert "whose source learned" in s["over"]
    assert ratio_summary({"a": None}, {"a": True})["share"] is None
    assert ratio_summary({"a": 0.9}, {"a": False})["total"] == 0


def test_ratios_over_the_sources_final_return_per_run(tmp_path):
    """One source column, one ratio column per run, and per run the tasks at >= 0.8 of the
    source; a source return of 0, or none, gives no ratio and is not counted."""
    src = {"cartpole-balance": 1000.0, "cheetah-run": 500.0, "pendulum-swingup": 0.0,
           "walker-walk": None}
    a = fake_run(tmp_path, "a", {"cartpole-balance": 82.0, "cheetah-run": 30.0,
                                 "pendulum-swingup": 5.0, "walker-walk": 40.0}, sources=src)
    b = fake_run(tmp_path, "b", {"cartpole-balance": 79.0, "cheetah-run": 45.0,
                                 "pendulum-swingup": 6.0}, sources=src)
    out = tmp_path / "cmp"
    assert cli.main(["--runs", a, b, "--out", out, "--episodes", 2]) == 0
    c = json.loads((out / "compare.json").read_text())
    assert c["source_return"] == src and c["source_differs"] == []
    assert c["ratios"]["a"] == {"cartpole-balance": pytest.approx(0.82),
                                "cheetah-run": pytest.approx(0.6),
                                "pendulum-swingup": None, "walker-walk": None}
    assert c["ratios"]["b"]["cartpole-balance"] == pytest.approx(0.79)
    assert c["ratios"]["b"]["walker-walk"] is None             # b did not evaluate it
    assert {lab: (s["reached"], s["total"], s["below"]) for lab, s in
            c["ratio_summary"].items()} == {"a": (1, 2, ["cheetah-run"]),
                                            "b": (1, 2, ["cartpole-balance"])}
    assert c["ratio_summary"]["a"]["share"] == 0.5
    rows = (out / "per_task.csv").read_text().splitlines()
    assert rows[0] == "task,a,b,source_return,a_ratio,b_ratio"
    assert rows[1].startswith("cartpole-balance,82.0,79.0,1000.0,0.82")
    assert rows[3] == "pendulum-swingup,5.0,6.0,0.0,,"
    assert rows[4] == "walker-walk,40.0,,,,"
    md = (out / "compare.md").read_text()
    assert "## Return over the source's final return" in md
    assert "| task | source final | a | b |" in md
    assert "| cartpole-balance | 1000.0 | 0.82 | 0.79 |" in md
    assert "| pendulum-swingup | 0.0 | - | - |" in md
    assert "| walker-walk | - | - | not evaluated |" in md
    assert "- a: 1 of 2 (50%); below: cheetah-run" in md
    assert "- b: 1 of 2 (50%); below: cartpole-balance" in md


def test_the_source_share_counted_is_the_flags(tmp_path, capsys):
    """--source-share 0.5 (the DreamerV3 offline criterion's share) counts cheetah-run's
    0.6 as reached; it is refused with --run and when not above 0."""
    src = {"cartpole-balance": 1000.0, "cheetah-run": 500.0}
    a = fake_run(tmp_path, "a", {"cartpole-balance": 82.0, "cheetah-run": 30.0}, sources=src)
    b = fake_run(tmp_path, "b", {"cartpole-balance": 40.0, "cheetah-run": 26.0}, sources=src)
    out = tmp_path / "cmp"
    assert cli.main(["--runs", a, b, "--out", out, "--episodes", 2,
                     "--source-share", 0.5]) == 0
    c = json.loads((out / "compare.json").read_text())
    assert {lab: (s["at_least"], s["reached"], s["below"]) for lab, s in
            c["ratio_summary"].items()} == {"a": (0.5, 2, []), "b": (0.5, 1, ["cartpole-balance"])}
    md = (out / "compare.md").read_text()
    assert "Tasks at >= 0.5 x the source's final return" in md and "- a: 2 of 2 (100%)" in md
    for bad in (["--runs", a, b, "--out", tmp_path / "x", "--source-share", 0],
                ["--runs", a, b, "--out", tmp_path / "y", "--source-share", "nan"],
                ["--run", a, "--source-share", 0.5]):
        capsys.readouterr()
        assert cli.main([str(x) for x in bad]) == 2
        assert "--source-share" in capsys.readouterr().err
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_compare_md_names_the_share_counted_at_exactly(tmp_path):
    """compare.md names the share as given: at --source-share 0.8000001 a task at 0.8 of
    its source is below it, and the line says 0.8000001, not 0.8."""
    src = {"cartpole-balance": 1000.0, "cheetah-run": 500.0}
    a = fake_run(tmp_path, "a", {"cartpole-balance": 80.0, "cheetah-run": 45.0}, sources=src)
    b = fake_run(tmp_path, "b", {"cartpole-balance": 90.0, "cheetah-run": 45.0}, sources=src)
    out = tmp_path / "cmp"
    assert cli.main(["--runs", a, b, "--out", out, "--episodes", 2,
                     "--source-share", "0.8000001"]) == 0
    md = (out / "compare.md").read_text()
    assert "Tasks at >= 0.8000001 x the source's final return" in md, md
    assert "- a: 1 of 2 (50%); below: cartpole-balance" in md


def test_ratio_summary_refuses_a_share_that_counts_nothing(tmp_path):
    """A share that is not a number above 0 (nan would count every task as reached) is a
    ValueError naming it, from the Python entries as from the flag."""
    ratios, learned = {"cartpole-balance": 0.1}, {"cartpole-balance": True}
    assert ratio_summary(ratios, learned, 0.5)["reached"] == 0
    for bad in (float("nan"), float("inf"), 0.0, -0.5):
        with pytest.raises(ValueError, match="share"):
            ratio_summary(ratios, learned, bad)


def test_runs_on_other_sources_keep_their_own_ratios(tmp_path):
    """Runs whose reports differ on a task's source return (other datasets): the source
    column is empty there, each ratio is over the run's own sources, and the md says so;
    runs without any source return (online) get no ratio section."""
    a = fake_run(tmp_path, "a", {"cartpole-balance": 82.0}, sources={"cartpole-balance": 1000.0})
    b = fake_run(tmp_path, "b", {"cartpole-balance": 72.0}, sources={"cartpole-balance": 900.0})
    reports = [json.loads((r / "report" / "report.json").read_text()) for r in (a, b)]
    c = build_comparison(reports)
    assert c["source_return"] == {"cartpole-balance": None}
    assert c["source_differs"] == ["cartpole-balance"]
    assert c["ratios"] == {"a": {"cartpole-balance": pytest.approx(0.82)},
                           "b": {"cartpole-balance": pytest.approx(0.8)}}
    out = tmp_path / "cmp"
    assert cli.main(["--runs", a, b, "--out", out, "--episodes", 2]) == 0
    md = (out / "compare.md").read_text()
    assert "The runs' sources differ on cartpole-balance" in md
    assert "| cartpole-balance | - | 0.82 | 0.80 |" in md
    on = [fake_run(tmp_path, n, {"cartpole-balance": 50.0}) for n in ("c", "d")]
    assert cli.main(["--runs", *on, "--out", tmp_path / "cmp2", "--episodes", 2]) == 0
    assert "source's final return" not in (tmp_path / "cmp2" / "compare.md").read_text()
    assert (tmp_path / "cmp2" / "per_task.csv").read_text().splitlines()[1] == \
        "cartpole-balance,50.0,50.0,,,"


def test_the_summary_counts_only_the_tasks_whose_source_learned(tmp_path):
    """A source at random level (cartpole-balance's source at its random return) is left
    out of the share, and compare.md and compare.json list it as not learned; a report's
    own source_learned is taken as written, and reports without one get the rule."""
    from wmx.evaluate.random_policy import random_returns
    cart = random_returns()["cartpole-balance"]["mean"]
    src = {"cartpole-balance": cart, "cheetah-run": 500.0, "walker-walk": 900.0}
    a = fake_run(tmp_path, "a", {"cartpole-balance": 40.0, "cheetah-run": 30.0,
                                 "walker-walk": 80.0}, sources=src)
    b = fake_run(tmp_path, "b", {"cartpole-balance": 40.0, "cheetah-run": 45.0,
                                 "walker-walk": 80.0}, sources=src)
    rep_b = b / "report" / "report.json"
    r = json.loads(rep_b.read_text())
    for row, learned in zip(r["per_task"], (True, True, None)):
        row["source_learned"] = learned
    rep_b.write_text(json.dumps(r))
    out = tmp_path / "cmp"
    assert cli.main(["--runs", a, b, "--out", out, "--episodes", 2]) == 0
    c = json.loads((out / "compare.json").read_text())
    assert c["learned"]["a"] == {"cartpole-balance": False, "cheetah-run": True,
                                 "walker-walk": True}
    sa, sb = c["ratio_summary"]["a"], c["ratio_summary"]["b"]
    assert (sa["reached"], sa["total"], sa["below"], sa["not_learned"]) == \
        (1, 2, ["cheetah-run"], ["cartpole-balance"])
    assert (sb["reached"], sb["total"], sb["below"], sb["learned_unknown"]) == \
        (2, 2, [], ["walker-walk"])
    md = (out / "compare.md").read_text()
    assert "of the tasks with a ratio whose source learned" in md
    assert "- a: 1 of 2 (50%); below: cheetah-run; left out, not learned: cartpole-balance" \
        in md
    assert "- b: 2 of 2 (100%); left out, learned unknown: walker-walk" in md


def test_runs_whose_names_look_like_suffixed_labels_keep_distinct_columns(tmp_path):
    """Runs named "a", "a" (other folders) and "a#2": three distinct labels, so no run's
    column overwrites another's."""
    from wmx.evaluate.compare import label_names
    assert label_names(["a", "a", "a#2"]) == ["a", "a#3", "a#2"]
    assert label_names(["a", "a", "a"]) == ["a", "a#2", "a#3"]
    # per_task.csv's columns stay distinct: a run named as a fixed column or as another
    # run's ratio column is suffixed
    assert label_names(["task", "a", "a_ratio"]) == ["task#2", "a", "a_ratio#2"]
    assert label_names(["source_return"]) == ["source_return#2"]
    runs = [fake_run(tmp_path / d, n, {"cartpole-balance": s}) for d, n, s in
            (("x", "a", 50.0), ("y", "a", 60.0), ("z", "a#2", 70.0))]
    out = tmp_path / "cmp"
    assert cli.main(["--runs", *runs, "--out", out, "--episodes", 2]) == 0
    c = json.loads((out / "compare.json").read_text())
    assert [r["label"] for r in c["runs"]] == ["a", "a#3", "a#2"]
    assert c["scores"] == {"a": {"cartpole-balance": 50.0}, "a#3": {"cartpole-balance": 60.0},
                           "a#2": {"cartpole-balance": 70.0}}


def test_force_never_replaces_a_folder_that_is_no_report(tmp_path, capsys):
    """--force replaces an earlier comparison or report, never a run directory or another
    folder: refused in one line, exit 2, the folder untouched."""
    a = fake_run(tmp_path, "a", {"cartpole-balance": 50.0}, newest=6)
    b = fake_run(tmp_path, "b", {"cartpole-balance": 60.0})
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("x")
    for out in (a, other):
        before = _listing(out)
        assert cli.main(["--runs", a, b, "--out", out, "--episodes", 2, "--force"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "not a report or a comparison" in err
        assert _listing(out) == before
    out = tmp_path / "cmp"
    assert cli.main(["--runs", a, b, "--out", out, "--episodes", 2]) == 0
    assert cli.main(["--runs", a, b, "--out", out, "--episodes", 2, "--force"]) == 0
    (tmp_path / "empty").mkdir()
    assert cli.main(["--runs", a, b, "--out", tmp_path / "empty", "--episodes", 2,
                     "--force"]) == 0


@pytest.mark.parametrize("text", ["{not json", "[]", '{"schema": "%s"}' % REPORT_SCHEMA])
def test_a_damaged_report_is_refused_in_one_line(tmp_path, capsys, text):
    """A run's report.json that is not JSON, not an object or lacks the report's parts:
    one line naming the file and the fix, exit 2, nothing written."""
    a = fake_run(tmp_path, "a", {"cartpole-balance": 50.0})
    b = fake_run(tmp_path, "b", {"cartpole-balance": 60.0})
    (b / "report" / "report.json").write_text(text)
    assert cli.main(["--runs", a, b, "--out", tmp_path / "cmp", "--episodes", 2]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(b / "report" / "report.json") in err
    assert "evaluate --run" in err and "--force" in err
    assert not (tmp_path / "cmp").exists()
