"""benchmarks/_mt19_tables.py and ``mt19_campaign.py table``: the record's sources and speed
rows pinned on a hand-made entry (medians, first call against resumed, ranges, the published
point's env steps named when they differ), the subcommand's output and refusal, and the
plan's speeds measured from the same timing (`_mt19_plan.run_sps`, `measured_sps`, and
`_mt19_next.session_sps`), odd values in them left out."""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import _mt19_record as record_lib  # noqa: E402
import _mt19_tables as tables  # noqa: E402
import mt19_campaign as camp  # noqa: E402


def timing(median_round, evals, excess):
    return {"median_round_s": median_round, "evals_s": evals, "compile_s_estimate": excess}


def entry(**kw):
    e = {"env_steps": 100000, "seeds": [0, 1], "final_return": {"0": 605.24, "1": 517.56},
         "final_return_mean": 561.395,
         "published_tdmpc2": {"env_steps": 100000, "return": 519.133},
         "episode_sets": [{"seed": 1, "content_hash": "989c8a125c41" + "0" * 52},
                          {"seed": 0, "content_hash": "2070a3e243ad" + "f" * 52}],
         "wmx_commit": "32364893ab6217f69dc33fd57a65f984ae6bfcda",
         "calls": [{"action": "new", "env_steps_to": 26000,
                    "timing": timing(2.43, [36.8, 8.8], 131.9)},
                   {"action": "resume", "env_steps_to": 60000,
                    "timing": timing(2.40, [31.3, 8.8, 8.7], 57.5)},
                   {"action": "resume", "env_steps_to": 100000,
                    "timing": timing(2.50, [28.0, 9.0], 62.0)}]}
    e.update(kw)
    return e


def test_sources_row_pinned():
    assert tables.sources_row("cheetah-run", entry()) == (
        "| cheetah-run | 100,000 | 605.2 / 517.6 | 561.4 | 519.1 | "
        "`2070a3e243ad`, `989c8a125c41` |")


def test_sources_row_names_the_published_env_steps_when_they_differ():
    e = entry(env_steps=180000, published_tdmpc2={"env_steps": 200000, "return": 300.0})
    assert "| 300.0 (at 200,000) |" in tables.sources_row("hopper-hop", e)
    assert "| - |" in tables.sources_row("x", entry(published_tdmpc2=None))


def test_speed_row_pinned():
    # training: median of 2.43, 2.40, 2.50 = 2.43 -> 1000 / 2.43 = 411.5; evaluation: median
    # of the non-first evaluations 8.8, 8.8, 8.7, 9.0 = 8.8; first evaluation 36.8 in the
    # first call, 28.0-31.3 in resumed ones; first-row excess 132 / 58-62
    assert tables.speed_row("cheetah-run", entry()) == (
        "| cheetah-run | 3236489 | 2.43 (411.5) | 8.8 | 37 / 28-31 | 132 / 58-62 | "
        "26,000, 60,000, 100,000 |")


def test_speed_row_without_timing_is_left_out():
    assert tables.speed_row("x", entry(calls=[{"action": "new", "env_steps_to": 1}])) is None
    md = tables.markdown({"tasks": {"b": entry(calls=[]), "a": entry()}}, ["a", "b"])
    src, spd = md.split("\n\n")
    assert [ln.split(" | ")[0] for ln in src.splitlines()[2:]] == ["| a", "| b"]
    assert [ln.split(" | ")[0] for ln in spd.splitlines()[2:]] == ["| a"]


def test_span():
    assert tables._span([]) == "-"
    assert tables._span([8.34, 8.26]) == "8.3"
    assert tables._span([54.2, 61.9]) == "54-62"
    assert tables._span([8.0, 9.44]) == "8.0-9.4"


def test_table_subcommand(tmp_path, capsys):
    # the committed record, read through the subcommand's flags
    data = json.loads((ROOT / "benchmarks" / "results" / record_lib.FILE).read_text())
    (tmp_path / record_lib.FILE).write_text(json.dumps(data))
    assert camp.main(["table", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    tasks = list(camp.campaign_of(camp.build_parser().parse_args(["table"])).tasks)
    assert out == tables.markdown(data, tasks)
    rows = [ln.split(" | ")[0][2:] for ln in out.split("\n\n")[0].splitlines()[2:]]
    assert rows == [t for t in tasks if t in data["tasks"]]


def test_table_without_a_record_is_one_line(tmp_path, capsys):
    assert camp.main(["table", "--results", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no record" in err and "ingest" in err


def test_measured_sps_pinned_newest_run_per_domain():
    import _mt19_plan as plan_lib
    # entry(): median of the median rounds 2.43 s per 1,000 env steps; every evaluation,
    # each call's first included: (36.8 + 8.8 + 31.3 + 8.8 + 8.7 + 28.0 + 9.0) / 7 = 18.771 s
    # per 10,000 -> 2.43 + 1.8771 = 4.3071 s per 1,000 -> 232.2
    assert plan_lib.run_sps(entry()) == 232.2
    # a round of 2,000 env steps (its recorded speed x its median) at 4.0 s, evaluations of
    # 10 s every 5,000 (the command's last --eval-every, as argparse reads it):
    # 4.0 / 2000 + 10 / 5000 = 0.004 s per env step -> 250.0
    two = entry(calls=[{"action": "new", "env_steps_to": 100000,
                        "timing": dict(timing(4.0, [10.0, 10.0], 120.0),
                                       env_steps_per_s_per_seed=500.0)}],
                command="train_online --eval-every 20000 --eval-every=5000 --seeds 0 1")
    assert plan_lib.run_sps(two) == 250.0
    rec = {"tasks": {
        "reacher-easy": dict(entry(), ingested="2026-12-07T12:00:00+00:00"),        # 232.2
        "reacher-hard": dict(two, ingested="2026-12-06T12:00:00+00:00"),            # older
        "cheetah-run": dict(two, ingested="2026-12-05T00:00:00+00:00"),
        "walker-walk": entry(calls=[]),                                             # no timing
        "walker-run": dict(entry(), seeds=[0, 1, 2, 3, 4]),
    }}
    assert plan_lib.measured_sps(rec) == {"reacher": 232.2, "cheetah": 250.0, "walker": 232.2}
    assert plan_lib.measured_sps(rec, seeds=2) == {"reacher": 232.2, "cheetah": 250.0}
    assert plan_lib.measured_sps(None) == {}
    m = plan_lib.measured_sps(rec, seeds=2)
    assert plan_lib.sps_for("cheetah-run", None, m) == 250.0
    assert plan_lib.sps_for("cheetah-run", 50.0, m) == 50.0            # --sps wins
    assert plan_lib.sps_for("walker-walk", None, m) == plan_lib.SPS_BY_DOMAIN["walker"]
    assert plan_lib.sps_for("hopper-hop", None, m) == plan_lib.SPS_DEFAULT


def test_eval_every_of_a_command():
    import _mt19_plan as plan_lib
    ev = plan_lib._eval_every
    assert ev({"command": "x --eval-every 5000"}) == 5000
    assert ev({"command": "x --eval-every   5000 --seeds 0"}) == 5000
    assert ev({"command": "x --eval-every=5000 --eval-every 2000"}) == 2000
    assert ev({"command": "x --eval-every 5e3"}) == 10_000              # not a whole number
    assert ev({"command": "x --eval-every 0"}) == 10_000
    assert ev({"command": "x --eval-every-foo 3"}) == 10_000
    assert ev({"eval_every": 4000, "command": "x --eval-every 5000"}) == 4000
    assert ev({"eval_every": -4000}) == 10_000 and ev({}) == 10_000


def test_measured_sps_needs_a_round_and_an_evaluation_and_trusts_no_odd_value():
    import _mt19_plan as plan_lib
    one = entry(calls=[{"action": "new", "env_steps_to": 12000,
                        "timing": timing(2.5, [37.5], 130.0)}])
    # 2.5 + 37.5 / 10 = 6.25 s per 1,000 -> 160.0
    assert plan_lib.run_sps(one) == 160.0
    odd = [None, [], {"timing": None}, {"timing": timing(None, [8.0], 1.0)},
           {"timing": timing(-1.0, [8.0], 1.0)}, {"timing": timing("2.4", [8.0], 1.0)},
           {"timing": timing(2.4, None, 1.0)}, {"timing": timing(2.4, [None, -3.0], 1.0)},
           {"timing": timing(float("nan"), [8.0], 1.0)}, {"timing": timing(True, [8.0], 1.0)}]
    for c in odd:
        assert plan_lib.run_sps(entry(calls=[c])) is None, c
    assert plan_lib.run_sps(entry(calls=None)) is None
    assert plan_lib.run_sps(entry(calls=odd + one["calls"])) == 160.0
    assert plan_lib.measured_sps({"tasks": {"cup-catch": one, "fish-swim": entry(calls=odd),
                                            "x": None}}) == {"cup": 160.0}
    assert plan_lib.measured_sps({"tasks": None}) == {} and plan_lib.measured_sps([]) == {}


def test_next_plans_with_this_data_roots_calls(tmp_path):
    import _mt19_next as next_lib
    rec = {"tasks": {"cheetah-run": entry()}}                        # cheetah 302.1
    camp_dir = tmp_path / "campaign"
    camp_dir.mkdir()
    piece = {"task": "cartpole-balance", "action": "new", "env_steps_to": 30000,
             "timing": timing(2.0, [9.0, 7.0, 8.0], 100.0)}         # 2.0 + 0.8 -> 357.1
    (camp_dir / "mt19-tdmpc2-cartpole-balance-x.calls.json").write_text(json.dumps([piece]))
    slow = dict(piece, task="cheetah-run", timing=timing(5.0, [9.0, 11.0], 100.0))
    (camp_dir / "mt19-tdmpc2-cheetah-run-y.calls.json").write_text(json.dumps([slow]))
    (camp_dir / "broken.calls.json").write_text("{not json")
    (camp_dir / "odd.calls.json").write_text(json.dumps(
        [None, {"task": 3, "timing": timing(1.0, [1.0], 1.0)},
         {"task": "finger-spin", "timing": {"median_round_s": 1.0, "evals_s": None}}]))
    got = next_lib.session_sps(rec, tmp_path, 10_000, 2)
    # cheetah: the slower of the record's 232.2 and this root's 5.0 + 1.0 -> 166.7
    assert got == {"cheetah": 166.7, "cartpole": 357.1}
    assert next_lib.session_sps(rec, tmp_path / "none", 10_000, 2) == {"cheetah": 232.2}
    assert next_lib.session_sps(rec, tmp_path / "none", 10_000, 5) == {}


def test_table_of_an_odd_entry_is_one_line(tmp_path, capsys):
    data = json.loads((ROOT / "benchmarks" / "results" / record_lib.FILE).read_text())
    for bad in ({"calls": [None]}, {"final_return": {"0": None, "1": 1.0}},
                {"published_tdmpc2": {"env_steps": 100000}}):
        d = json.loads(json.dumps(data))
        d["tasks"]["cheetah-run"].update(bad)
        (tmp_path / record_lib.FILE).write_text(json.dumps(d))
        code = camp.main(["table", "--results", str(tmp_path)])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and "cheetah-run: its record entry" in err, bad
