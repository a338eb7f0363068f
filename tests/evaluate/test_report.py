"""Report building (scores, sources, published returns, aggregates) and atomic writing."""
import csv
import json

import numpy as np
import pytest

from store_fixtures import task_info, write_dataset, write_source_run, write_source_set
from wmx.evaluate import plots
from wmx.evaluate import report as rep
from wmx.evaluate.random_policy import LEARNED_MARGIN, random_returns
from wmx.evaluate.reference_curves import (curve, points_up_to, published_point,
                                            published_return)
from wmx.evaluate.runs import RunInfo
from wmx.runs.offline_config import OfflineRunConfig

T = 20
TASKS = ("cartpole-balance", "cheetah-run")


@pytest.fixture(scope="module")
def offline(tmp_path_factory):
    """A synthetic offline run (config + metrics, no real checkpoint) on a synthetic store."""
    home = tmp_path_factory.mktemp("home")
    sets = [write_source_set(home, task_info(t, T), seed=i) for i, t in enumerate(TASKS)]
    ds = write_dataset(home, "tst", sets)
    write_source_run(home, "src-0", [{"seed": 0, "kind": "eval", "env_steps": 200_000,
                                      "return": 900.0}])
    rc = OfflineRunConfig(dataset=f"tst@{ds.content_hash}", taskset=ds.taskset.to_dict(),
                          seeds=(0, 1), updates=6, batch_size=16, preset="tiny", log_every=2,
                          eval_every=2, checkpoint_every=2, eval_episodes=3)
    run_dir = home / "runs" / "off"
    run_dir.mkdir(parents=True)
    config = {**rc.to_json(), "code_version": "deadbeef"}
    (run_dir / "config.json").write_text(json.dumps(config))
    with (run_dir / "metrics.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, ["seed", "kind", "updates", "task", "return"])
        w.writeheader()
        for u in (2, 4, 6):
            for t in TASKS:
                for s in (0, 1):
                    w.writerow({"seed": s, "kind": "eval", "updates": u, "task": t,
                                "return": 10.0 * u + s})
            w.writerow({"seed": 0, "kind": "eval", "updates": u, "task": "mean", "return": ""})
    info = RunInfo(run_dir, "offline", config, rc, run_dir / "checkpoints" / "000000000006", 6,
                   {"updates": 6, "eval_index": 3}, rc.task_set.names, rc.seeds)
    returns = {"cartpole-balance": np.array([[300.0, 340.0, 320.0], [500.0, 520.0, 510.0]],
                                            np.float32),
               "cheetah-run": np.array([[10.0, 30.0, 20.0], [40.0, 60.0, 50.0]], np.float32)}
    meta = {"keys": "fresh", "eval_index": 0, "episodes": 3, "tasks": {}}
    report = rep.build_report(info, returns, meta, home)
    return home, sets, ds, info, returns, report


def test_per_task_scores_sources_and_published(offline):
    _, sets, _, _, returns, report = offline
    rows = {r["task"]: r for r in report["per_task"]}
    assert list(rows) == list(TASKS)
    cart = rows["cartpole-balance"]
    assert cart["return_mean"] == pytest.approx(returns["cartpole-balance"].mean())
    assert cart["return_std"] == pytest.approx(returns["cartpole-balance"].std())
    assert cart["score"] == pytest.approx(cart["return_mean"] / 10)
    assert (cart["score_min"], cart["score_max"]) == (pytest.approx(32.0), pytest.approx(51.0))
    assert (cart["seeds"], cart["episodes"]) == (2, 3)
    # source: run src-0 exists -> its last eval row; published at those env steps
    assert (cart["source_return"], cart["source_score"]) == (900.0, 90.0)
    assert cart["source_basis"] == "run" and cart["source_env_steps"] == 200_000
    # 200,000 env steps is a published TD-MPC2 point: its mean, no interpolation
    xs, ys, _ = curve("cartpole-balance")
    assert cart["published_return"] == pytest.approx(float(ys[list(xs).index(200_000)]))
    assert cart["published_env_steps"] == 200_000 and cart["published_note"] is None
    assert cart["published_score"] == pytest.approx(cart["published_return"] / 10)
    # source: run src-1 is gone -> the episode set's last 10 returns, at its env steps
    # (480), within 1,000 of the published point at 0: that point, not an interpolation
    ch = rows["cheetah-run"]
    assert ch["source_basis"] == "episode_set"
    assert ch["source_return"] == pytest.approx(np.mean(sets[1].episode_returns[-10:]))
    assert sets[1].episode_count * T * 2 == 480
    cx, cy, _ = curve("cheetah-run")
    assert (ch["published_env_steps"], ch["published_return"]) == (0, pytest.approx(float(cy[0])))
    # far from any point: none shown, the nearest named
    far = rep._published("cheetah-run", 42_000, "tdmpc2")
    assert far["published_return"] is None and far["published_env_steps"] is None
    assert far["published_note"] == "no published point near 42,000 env steps " \
                                    "(nearest: 0 and 100,000)"


def test_published_points_are_never_interpolated():
    # TD-MPC2: points every 100,000; within max(1,000, 2%) of one -> that point
    p = published_point("walker-walk", 100_500)
    xs, ys, seeds = curve("walker-walk")
    assert (p.env_steps, p.value) == (100_000, pytest.approx(float(ys[1])))
    assert p.seed_min == pytest.approx(np.nanmin(seeds[:, 1]))
    assert published_return("walker-walk", 150_000) is None
    assert (published_point("walker-walk", 150_000).below,
            published_point("walker-walk", 150_000).above) == (100_000, 200_000)
    # DreamerV3: its own curve (training-episode returns every 10,000 from 10,000),
    # cup-catch under its dm_control name
    d = published_point("cup-catch", 50_000, "dreamerv3")
    dx, dy, _ = curve("cup-catch", "dreamerv3")
    assert d.env_steps == 50_000 and d.value == pytest.approx(float(dy[list(dx).index(50_000)]))
    assert published_point("cartpole-balance", 5_000, "dreamerv3").value is None
    assert published_point("probe-action", 0) is None
    px, py, rng = points_up_to("reacher-easy", 35_000, "dreamerv3")
    assert px == [10_000, 20_000, 30_000] and len(py) == len(rng) == 3
    assert all(lo <= y <= hi for (lo, hi), y in zip(rng, py))


def test_aggregates_and_lineage_in_the_report(offline):
    _, sets, ds, info, _, report = offline
    wmx = {a["statistic"]: a for a in report["aggregates"] if a["who"] == "wmx"}
    scores = [r["score"] for r in report["per_task"]]
    assert wmx["mean"]["value"] == pytest.approx(np.mean(scores))
    assert wmx["median"]["value"] == pytest.approx(np.median(scores))
    assert {a["who"] for a in report["aggregates"]} == {"wmx", "source", "published"}
    lin = report["lineage"]
    assert lin["dataset"] == f"tst@{ds.content_hash}" and lin["dataset_found"]
    assert lin["code_version"] == "deadbeef"
    assert [s["content_hash"] for s in lin["sources"]] == [m.content_hash for m in sets]
    assert report["returns"]["cheetah-run"]["1"] == [40.0, 60.0, 50.0]
    json.dumps(report, allow_nan=False)


def test_write_report_files(offline, tmp_path):
    _, sets, ds, _, _, report = offline
    md = rep.write_report(report, tmp_path / "r")
    assert md == tmp_path / "r" / "report.md"
    assert sorted(p.name for p in md.parent.iterdir()) == sorted(rep.FILES)
    text = md.read_text()
    assert f"tst@{ds.content_hash}" in text and sets[0].content_hash[:12] in text
    assert "src-0" in text and "scores.png" in text and "learning_curves.png" in text
    with (md.parent / "per_task.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["task"] for r in rows] == list(TASKS)
    assert float(rows[0]["score"]) == pytest.approx(float(rows[0]["return_mean"]) / 10)
    assert rep.load_report(md.parent)["per_task"] == report["per_task"]
    for png in ("scores.png", "learning_curves.png"):
        assert (md.parent / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_failure_mid_write_leaves_no_report(offline, tmp_path, monkeypatch):
    report = offline[-1]

    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(plots, "learning_curves", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        rep.write_report(report, tmp_path / "r")
    assert list(tmp_path.iterdir()) == []                  # no report, no temporary leftovers


def test_existing_report_is_kept_unless_forced(offline, tmp_path, monkeypatch):
    report = offline[-1]
    out = tmp_path / "r"
    rep.write_report(report, out)
    (out / "marker").write_text("old")
    with pytest.raises(FileExistsError, match="--force"):
        rep.write_report(report, out)
    assert (out / "marker").exists()
    monkeypatch.setattr(plots, "score_bars", lambda *a, **k: (_ for _ in ()).throw(OSError("x")))
    with pytest.raises(OSError):
        rep.write_report(report, out, force=True)          # a failed replace keeps the old one
    assert (out / "marker").exists()
    monkeypatch.undo()
    rep.write_report(report, out, force=True)
    assert not (out / "marker").exists() and (out / "report.md").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]


def test_non_finite_returns_still_give_a_strict_json_report(offline, tmp_path):
    home, _, _, info, returns, _ = offline
    bad = {**returns, "cheetah-run": np.full((2, 3), np.nan, np.float32)}
    report = rep.build_report(info, bad, {"keys": "fresh", "eval_index": 0, "episodes": 3,
                                          "tasks": {}}, home)
    wmx = [a for a in report["aggregates"] if a["who"] == "wmx"]
    assert all(a["n_tasks"] == 1 for a in wmx)              # the NaN task is left out
    md = rep.write_report(report, tmp_path / "r")
    got = json.loads((md.parent / "report.json").read_text())
    assert {r["task"]: r["score"] for r in got["per_task"]}["cheetah-run"] is None


def test_learning_curves_legend_goes_on_the_first_panel_with_lines(tmp_path, monkeypatch):
    """A first panel with nothing drawn (a check before its first evaluation) gets no empty
    legend, and matplotlib warns of none; the legend goes on the first panel with lines."""
    import warnings

    from wmx.evaluate import plots
    drawn = []
    real_save = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, path: (drawn.append(fig),
                                                          real_save(fig, path))[1])
    empty = {"task": "a", "x": [], "returns": []}
    full = {"task": "b", "x": [1, 2], "returns": [[1.0, 2.0], [3.0]]}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plots.learning_curves([empty, full], tmp_path / "c.png", "updates")
    assert (tmp_path / "c.png").stat().st_size
    assert [ax.get_legend() is not None for ax in drawn[0].axes] == [False, True]


def test_trainer_evaluation_is_the_metrics_at_the_checkpoint(offline, tmp_path):
    """The report sets the trainer's own evaluation at the checkpoint (metrics.csv rows at its
    updates, their episode count) beside its own; none when the metrics say no count."""
    import dataclasses
    _, _, _, info, _, report = offline
    assert report["evaluation"]["trainer"] is None       # the fixture's rows have no episodes
    run_dir = tmp_path / "off"
    run_dir.mkdir()
    rows = ["seed,kind,updates,task,episodes,return"]
    rows += [f"{s},eval,{u},{t},1,{100 * u + 10 * i + s}" for u in (4, 6)
             for i, t in enumerate(TASKS) for s in (0, 1)]
    rows += ["0,eval,6,mean,2,", "1,eval,6,mean,2,"]
    (run_dir / "metrics.csv").write_text("\n".join(rows) + "\n")
    got = rep.trainer_evaluation(dataclasses.replace(info, run_dir=run_dir))
    assert got == {"step": 6, "episodes": 1, "seeds": 2,
                   "return": {TASKS[0]: 600.5, TASKS[1]: 610.5}, "score": 60.55}
    md = rep._markdown({**report, "evaluation": {**report["evaluation"], "trainer": got}})
    assert ("The trainer's own evaluation at this checkpoint (metrics.csv): 1 episode per "
            f"seed and task, mean return {TASKS[0]} 600.5, {TASKS[1]} 610.5; mean score 60.5"
            ) in md


def test_ratio_is_the_return_over_the_sources_final_return(offline, tmp_path):
    """ratio = return_mean / source_return, in report.json, per_task.csv and report.md;
    empty when the source return is unknown or not positive, or the return not finite."""
    src = [{"task": "walker-walk", "final_return": 1000.0, "env_steps": 100_000,
            "basis": "run"}]
    row = rep._task_row("walker-walk", np.full((2, 3), 820.0), src, None)
    assert row["ratio"] == pytest.approx(0.82) and row["source_return"] == 1000.0
    for final in (0.0, -50.0):                              # a fraction of nothing: empty
        row = rep._task_row("walker-walk", np.full((2, 3), 820.0),
                            [{**src[0], "final_return": final}], None)
        assert row["source_return"] == final and row["ratio"] is None
    assert rep._task_row("walker-walk", np.full((2, 3), 820.0), [], 100_000)["ratio"] is None
    assert rep._task_row("walker-walk", np.full((2, 3), np.nan), src, None)["ratio"] is None
    assert rep.source_ratio(820.0, 1000.0) == pytest.approx(0.82)
    assert rep.source_ratio(None, 1000.0) is None and rep.source_ratio(820.0, None) is None
    assert rep.source_ratio(820.0, float("inf")) is None
    # the fixture's report: cartpole-balance 415.0 over its source run's 900.0
    report = offline[-1]
    rows = {r["task"]: r for r in report["per_task"]}
    assert rows["cartpole-balance"]["ratio"] == pytest.approx(415.0 / 900.0)
    ch = rows["cheetah-run"]
    assert ch["ratio"] == pytest.approx(ch["return_mean"] / ch["source_return"])
    md = rep.write_report(report, tmp_path / "r")
    with (md.parent / "per_task.csv").open() as f:
        got = list(csv.DictReader(f))
    assert list(got[0]) == list(rep.PER_TASK_COLUMNS)
    assert float(got[0]["ratio"]) == pytest.approx(415.0 / 900.0)
    text = md.read_text()
    assert "| source final (score) | ratio | random | learned | basis |" in text
    rnd = random_returns()["cartpole-balance"]["mean"]
    assert ("| cartpole-balance | 415.0 ± 95.9 | 41.5 | 32.0-51.0 | 900.0 (90.0) | 0.46 | "
            f"{rnd:.1f} | yes | run |") in text
    assert "Ratio: return / the source agents' final return" in text


def test_source_learned_is_the_source_return_against_the_random_return(offline, tmp_path):
    """source_learned: true when the source return is >= the committed random return +
    LEARNED_MARGIN, false below, empty when either is unknown (no source; a task not in
    the table; a T other than the table's); in report.json, per_task.csv and report.md."""
    rnd = random_returns()["cartpole-balance"]["mean"]

    def row(final, task="cartpole-balance", protocol=None):
        src = [] if final is None else [{"task": task, "final_return": final,
                                         "env_steps": 100_000, "basis": "run"}]
        return rep._task_row(task, np.full((2, 3), 100.0), src, None, protocol=protocol)

    at = row(rnd + LEARNED_MARGIN)
    assert at["random_return"] == rnd and at["source_learned"] is True
    assert row(rnd + LEARNED_MARGIN - 0.01)["source_learned"] is False
    assert row(rnd)["source_learned"] is False                # random level: not learned
    assert row(None)["source_learned"] is None                # no source return
    assert row(900.0, "probe-action")["random_return"] is None
    assert row(900.0, "probe-action")["source_learned"] is None  # not in the table
    other_T = row(900.0, protocol={"episode_length": 20, "action_repeat": 2})
    assert other_T["random_return"] is None and other_T["source_learned"] is None
    own_T = row(900.0, protocol={"episode_length": 500, "action_repeat": 2})
    assert own_T["source_learned"] is True
    report = {**offline[-1], "per_task": [at, row(rnd), row(None, "cheetah-run")]}
    md = rep.write_report(report, tmp_path / "r")
    with (md.parent / "per_task.csv").open() as f:
        got = [r["source_learned"] for r in csv.DictReader(f)]
    assert got == ["True", "False", ""]
    assert [r["source_learned"] for r in rep.load_report(md.parent)["per_task"]] == \
        [True, False, None]
    lines = [ln for ln in md.read_text().splitlines() if ln.startswith("| c")]
    assert [ln.split(" | ")[7] for ln in lines] == ["yes", "no", "-"]
