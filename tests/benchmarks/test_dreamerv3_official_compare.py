"""benchmarks/learning/dreamerv3_official_compare.py: point matching, the published bins,
the criterion's readings and verdict, and the files it writes (no training)."""
import csv
import importlib.util
import json
import sys
from pathlib import Path

import pytest

_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "learning"
sys.path.insert(0, str(_DIR))
_SPEC = importlib.util.spec_from_file_location("dreamerv3_official_compare",
                                               _DIR / "dreamerv3_official_compare.py")
cmp = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(cmp)

COLS = ["seed", "kind", "agent_steps", "env_steps", "episodes", "return", "return_std",
        "updates", "wall_s"]


def _csv(path: Path, rows: list[tuple[int, int, float]], kind: str = "train") -> Path:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLS)
        for seed, x, ret in rows:
            w.writerow([seed, kind, x // 2, x, 16, ret, 1.0, x // 4, 1.0])
    return path


def test_points_are_matched_by_rounded_env_steps():
    rows = [{"seed": "0", "env_steps": "16032", "return": "37.5"},
            {"seed": "1", "env_steps": "16032", "return": "90.0"},
            {"seed": "0", "env_steps": "32064", "return": "176.0"}]
    assert cmp.train_curve(rows) == {16000: {0: 37.5, 1: 90.0}, 32000: {0: 176.0}}
    dup = rows + [{"seed": "0", "env_steps": "15800", "return": "1"}]
    with pytest.raises(ValueError, match="two train rows near env step 16000"):
        cmp.train_curve(dup)
    assert list(cmp.train_curve(dup[2:], match=100).items()) == \
        [(15800, {0: 1.0}), (32100, {0: 176.0})]          # sorted by env steps


def test_published_bins_end_at_the_next_multiple_of_10000():
    assert [cmp.published_bin(x) for x in (10000, 10001, 16000, 32064, 48000, 50000)] == \
        [10000, 20000, 20000, 40000, 50000, 50000]


def test_readings_on_a_hand_made_case():
    official = {16000: {0: 40.0, 1: 90.0}, 32000: {0: 150.0, 1: 180.0},
                48000: {0: 200.0, 1: 780.0}, 64000: {0: 800.0}}
    arm = {16000: {0: 50.0, 1: 70.0}, 32000: {0: 120.0, 1: 170.0},
           48000: {0: 100.0, 1: 600.0}, 64000: {0: 10.0, 1: 20.0}}
    published = {20000: (36.0, 0.0, 111.0), 40000: (485.0, 0.0, 954.0),
                  50000: (630.0, 253.0, 907.0)}
    r = cmp.judge(arm, official, published, until=64000, threshold=300.0, by=50000)
    pts = r["within_official"]["points"]
    # 64,000 is skipped: only one of the two official seeds logged there
    assert [(p["env_steps"], p["mean"], p["ok"]) for p in pts] == \
        [(16000, 60.0, True), (32000, 145.0, False), (48000, 350.0, True)]
    assert r["within_official"]["ok"] is False
    assert r["threshold"] == {"value": 300.0, "by": 50000, "best": 350.0, "at": 48000,
                              "ok": True}
    pub = r["within_published"]["points"]
    assert [(p["published_at"], p["ok"]) for p in pub] == \
        [(20000, True), (40000, True), (50000, True)]
    assert cmp.verdict(r) is False
    r2 = cmp.judge(arm, official, published, until=16000, threshold=300.0, by=50000)
    assert r2["within_official"]["ok"] is True and cmp.verdict(r2) is True
    low = cmp.judge({48000: {0: 100.0, 1: 200.0}}, official, published, 64000, 300.0, 50000)
    assert low["threshold"]["ok"] is False
    assert low["within_published"]["points"][0]["ok"] is False        # 150 < 253
    assert cmp.verdict(low, judge_published=True) is False
    none = cmp.judge({70000: {0: 1.0}}, official, published, 64000, 300.0, 50000)
    assert none["within_official"]["ok"] is None and cmp.verdict(none) is None


def test_main_writes_the_json_plot_and_official_rows(tmp_path):
    off = tmp_path / "off0"
    off.mkdir()
    _csv(off / "metrics.csv", [(0, 16032, 40.0), (0, 32064, 150.0), (0, 48096, 780.0)])
    (off / "official_summary.json").write_text(json.dumps({
        "official_commit": "29eb964e29", "env_steps": 64224, "train_steps": 15537,
        "wall_s": 700.0, "config": {"compute_dtype": "float32", "seed": 0},
        "calls": [{"stop": "budget", "wall_s": 500.0, "env_steps_start": 0,
                   "env_steps_end": 52512, "devices": ["TPU_0"], "jax": "0.10.2",
                   "until_first_train_s": 180.0,
                   "after_first_train": {"s": 320.0, "env_steps_per_s": 154.0}}]}))
    off1 = _csv(tmp_path / "off1.csv", [(1, 16032, 90.0), (1, 32064, 180.0), (1, 48096, 200.0)])
    run = tmp_path / "run"
    run.mkdir()
    _csv(run / "metrics.csv", [(0, 16000, 50.0), (1, 16000, 70.0), (0, 32000, 160.0),
                               (1, 32000, 170.0), (0, 48000, 100.0), (1, 48000, 600.0)])
    (run / "config.json").write_text(json.dumps({"code_version": "abc1234def"}))
    out = tmp_path / "res" / "cmp"
    res = cmp.main(["--official", str(off), str(off1), "--wmx", f"bf16={run}",
                    "--wmx", f"f32={run / 'metrics.csv'}@fff0000", "--judge", "f32",
                    "--out", str(out)])
    assert res["passed"] is True and res["judged"] == "f32"
    assert res["wmx"]["bf16"]["commit"] == "abc1234def"
    assert res["wmx"]["f32"]["commit"] == "fff0000"
    assert res["chip"] == ["TPU_0"]
    assert res["official"]["runs"][0]["env_steps_per_s_training"] == 154.0
    assert res["official"]["curve"]["48000"] == {"0": 780.0, "1": 200.0}
    assert json.loads((tmp_path / "res" / "cmp.json").read_text())["passed"] is True
    assert (tmp_path / "res" / "cmp.png").stat().st_size > 1000
    with (tmp_path / "res" / "cmp_official_metrics.csv").open() as f:
        assert len(list(csv.DictReader(f))) == 6
    assert not list((tmp_path / "res").glob("*.tmp"))

    # the record as the official input of a later comparison: same runs, rows and verdict
    again = cmp.main(["--official", str(tmp_path / "res" / "cmp.json"), "--wmx",
                      f"f32={run / 'metrics.csv'}@fff0000", "--out", str(tmp_path / "b" / "cmp")])
    assert again["official"] == res["official"] and again["chip"] == ["TPU_0"]
    assert again["wmx"]["f32"] == res["wmx"]["f32"] and again["passed"] is True
    assert (tmp_path / "b" / "cmp_official_metrics.csv").read_text() == \
        (tmp_path / "res" / "cmp_official_metrics.csv").read_text()
    (tmp_path / "other.json").write_text(json.dumps({"task": "reacher-easy"}))
    with pytest.raises(SystemExit, match="not a comparison record"):
        cmp.main(["--official", str(tmp_path / "other.json"), "--wmx", f"f32={run}",
                  "--out", str(tmp_path / "c" / "cmp")])
    assert not (tmp_path / "c").exists()


def test_a_record_that_cannot_give_official_runs_is_one_line(tmp_path):
    """An earlier record as --official: damaged, of bare metrics.csv files only (no official
    runs, so no rows kept beside it), or without its _official_metrics.csv: one line
    naming the record and what to give instead, and nothing written."""
    run = _csv(tmp_path / "run.csv", [(0, 16000, 50.0), (0, 32000, 160.0)])
    off = _csv(tmp_path / "off.csv", [(0, 16032, 40.0), (0, 32064, 150.0)])
    bare = cmp.main(["--official", str(off), "--wmx", f"a={run}", "--out",
                     str(tmp_path / "bare" / "cmp")])
    assert bare["official"]["runs"] == []
    assert not (tmp_path / "bare" / "cmp_official_metrics.csv").exists()
    kept = tmp_path / "kept" / "cmp.json"       # official runs, its csv gone
    kept.parent.mkdir()
    kept.write_text(json.dumps({**bare, "official": {**bare["official"], "runs": [
        {"devices": ["TPU_0"], "config": None, "official_commit": None}]}}))
    (tmp_path / "damaged.json").write_text('{"official": ')
    (tmp_path / "list.json").write_text("[]")
    for record, why in [(tmp_path / "bare" / "cmp.json", "no official runs"),
                        (kept, "cmp_official_metrics.csv (its official rows) is missing"),
                        (tmp_path / "damaged.json", "unreadable"),
                        (tmp_path / "list.json", "not a comparison record")]:
        with pytest.raises(SystemExit) as e:
            cmp.main(["--official", str(record), "--wmx", f"a={run}", "--out",
                      str(tmp_path / "new" / "cmp")])
        assert str(e.value).startswith(f"{record}: ") and why in str(e.value)
        assert "\n" not in str(e.value)
    assert not (tmp_path / "new").exists()


def test_a_run_folders_commit_is_its_training_calls(tmp_path):
    """A wmx run folder's commit: its training calls' (benchmark.json), not the commit
    that created it (config.json); a call that trained nothing is not one of them."""
    run = tmp_path / "run"
    run.mkdir()
    _csv(run / "metrics.csv", [(0, 16000, 50.0), (0, 32000, 160.0)])
    (run / "config.json").write_text(json.dumps({"code_version": "0000000aaa"}))
    calls = [{"code_version": c, "device": "tpu: TPU v5 lite", "env_steps_from": a,
              "env_steps_to": b} for c, a, b in (("1111111bbb", 0, 16000),
                                                  ("2222222ccc", 16000, 32000),
                                                  ("3333333ddd", 32000, 32000))]
    (run / "benchmark.json").write_text(json.dumps({"training_calls": calls}))
    assert cmp.wmx_arm(run, None)[1] == "1111111bbb+2222222ccc"
    assert cmp.wmx_arm(run, "fff0000")[1] == "fff0000"         # @COMMIT wins
    assert cmp._short("1111111bbb+2222222ccc") == "1111111+2222222"


def test_runs_under_one_label_are_pooled_into_one_arm(tmp_path):
    """Seeds 0-1 and 2 run as two programs, given under one label: one arm of 3 seeds, its
    commits joined; a seed in both runs is refused."""
    off = _csv(tmp_path / "off.csv", [(0, 16032, 40.0), (1, 16032, 90.0)])
    a = tmp_path / "a"
    a.mkdir()
    _csv(a / "metrics.csv", [(0, 16000, 50.0), (1, 16000, 70.0)])
    (a / "config.json").write_text(json.dumps({"code_version": "aaaaaaa111"}))
    b = _csv(tmp_path / "b.csv", [(2, 16000, 90.0)])
    res = cmp.main(["--official", str(off), "--wmx", f"bf16={a}", "--wmx", f"bf16={b}@bbbbbbb2",
                    "--until", "16000", "--by", "16000", "--threshold", "60",
                    "--out", str(tmp_path / "o")])
    assert list(res["wmx"]) == ["bf16"]
    assert res["wmx"]["bf16"]["curve"]["16000"] == {"0": 50.0, "1": 70.0, "2": 90.0}
    assert res["wmx"]["bf16"]["commit"] == "aaaaaaa111+bbbbbbb2"
    assert res["wmx"]["bf16"]["reading"]["threshold"]["best"] == pytest.approx(70.0)
    with pytest.raises(SystemExit, match=r"seed\(s\) \[1\] in both"):
        cmp.main(["--official", str(off), "--wmx", f"bf16={a}", "--wmx",
                  f"bf16={_csv(tmp_path / 'c.csv', [(1, 16000, 1.0)])}",
                  "--out", str(tmp_path / "o2")])
    assert not (tmp_path / "o2.json").exists()


def test_points_some_seeds_of_a_pooled_arm_lack_are_not_read():
    """Seeds 2-4 cut short at 32,000 beside seeds 0-1 to 48,000: the arm's 48,000 point
    (seeds 0-1 only) is neither judged nor in the threshold's best; the JSON keeps it."""
    official = {16000: {0: 40.0, 1: 90.0}, 32000: {0: 150.0, 1: 180.0},
                48000: {0: 200.0, 1: 780.0}}
    arm = {16000: {s: 60.0 for s in range(5)}, 32000: {s: 160.0 for s in range(5)},
           48000: {0: 900.0, 1: 900.0}}
    assert cmp.complete(arm) == {16000: arm[16000], 32000: arm[32000]}
    r = cmp.judge(arm, official, {}, until=64000, threshold=300.0, by=50000)
    assert [p["env_steps"] for p in r["within_official"]["points"]] == [16000, 32000]
    assert r["threshold"]["best"] == 160.0 and r["threshold"]["ok"] is False
    assert cmp.complete({}) == {}


def test_bad_arguments_fail_in_one_line(tmp_path):
    empty = _csv(tmp_path / "e.csv", [(0, 16000, 1.0)], kind="eval")
    with pytest.raises(SystemExit, match="no train rows"):
        cmp.main(["--official", str(empty), "--wmx", f"a={empty}", "--out", str(tmp_path / "o")])
    with pytest.raises(SystemExit, match="write LABEL=PATH"):
        cmp.parse_arm("just-a-path")
    ok = _csv(tmp_path / "ok.csv", [(0, 16000, 1.0)])
    with pytest.raises(SystemExit, match="--judge x: not a --wmx label"):
        cmp.main(["--official", str(ok), "--wmx", f"a={ok}", "--judge", "x",
                  "--out", str(tmp_path / "o")])
    with pytest.raises(SystemExit, match="no such metrics.csv"):
        cmp.main(["--official", str(tmp_path / "missing"), "--wmx", f"a={ok}",
                  "--out", str(tmp_path / "o")])
    assert not (tmp_path / "o.json").exists()
