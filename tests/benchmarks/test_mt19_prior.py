"""The mt19 plan's price for a domain not measured yet (`_mt19_plan.prior_sps`): the least-
squares line of seconds per env step against physics cost through the measured domains, at
PRIOR_MARGIN of it and never above the fastest measured; the physics file's reading; the
order of the speeds (`sps_for`); plan printing the priced domains; and
benchmarks/mt19_physics.py's record of one cheap task, and its refusal of a foreign file."""
import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import _mt19_plan as plan_lib  # noqa: E402
import mt19_campaign as camp  # noqa: E402
import mt19_physics  # noqa: E402


def _sps(a: float, b: float, cost: float) -> float:
    return 1.0 / (a + b * cost)


def test_the_prior_is_the_line_through_the_measured_domains_at_the_margin():
    a, b = 0.003, 0.001                         # s per env step: agent part, per physics ms
    known = {"reacher": _sps(a, b, 0.2), "walker": _sps(a, b, 2.5), "cheetah": _sps(a, b, 0.4)}
    physics = {"reacher-easy": 0.2, "reacher-hard": 0.1, "walker-run": 2.5, "walker-walk": 1.0,
               "cheetah-run": 0.4, "fish-swim": 1.2, "hopper-hop": 3.0, "hopper-stand": 2.0}
    prior = plan_lib.prior_sps(known, physics)
    assert set(prior) == {"fish", "hopper"}       # the measured domains are not priced
    assert prior["fish"] == pytest.approx(plan_lib.PRIOR_MARGIN * _sps(a, b, 1.2), abs=0.05)
    # a domain's cost is its slowest task's (hopper-hop, 3.0 ms: slower than any measured)
    assert prior["hopper"] == pytest.approx(plan_lib.PRIOR_MARGIN * _sps(a, b, 3.0), abs=0.05)
    assert prior["hopper"] < min(known.values())


def test_the_prior_never_exceeds_the_fastest_measured_domain():
    known = {"reacher": 300.0, "walker": 200.0}
    prior = plan_lib.prior_sps(known, {"reacher-easy": 1.0, "walker-walk": 2.0,
                                       "acrobot-swingup": 0.0001})
    # the line through (1, 1/300) and (2, 1/200), extrapolated to almost no physics, says
    # about 600 per s: at the margin still above the fastest measured
    b = 1 / 200 - 1 / 300
    line = 1.0 / (1 / 300 - b + b * 0.0001)
    assert line * plan_lib.PRIOR_MARGIN > 500.0
    assert prior == {"acrobot": 300.0}


def test_more_mjx_steps_than_any_measured_domain_is_priced_no_faster_than_the_slowest():
    a, b = 0.003, 0.001
    known = {"reacher": _sps(a, b, 0.2), "walker": _sps(a, b, 2.5)}
    physics = {"reacher-easy": 0.2, "walker-walk": 2.5, "fish-swim": 1.2, "cup-catch": 0.6}
    steps = {"reacher-easy": 8, "walker-walk": 20, "fish-swim": 40, "cup-catch": 20}
    prior = plan_lib.prior_sps(known, physics, steps)
    assert prior["fish"] == round(known["walker"], 1)       # the line says faster: capped
    assert plan_lib.PRIOR_MARGIN * _sps(a, b, 1.2) > known["walker"]
    # as many steps as a measured domain: the line at the margin
    assert prior["cup"] == pytest.approx(plan_lib.PRIOR_MARGIN * _sps(a, b, 0.6), abs=0.05)
    assert plan_lib.prior_sps(known, physics)["fish"] == pytest.approx(
        plan_lib.PRIOR_MARGIN * _sps(a, b, 1.2), abs=0.05)   # no step counts: no such cap


@pytest.mark.parametrize("known, physics", [
    ({"reacher": 300.0}, {"reacher-easy": 0.2, "fish-swim": 1.0}),        # one point
    ({"reacher": 300.0, "walker": 170.0}, {"reacher-easy": 0.2, "walker-walk": 0.2,
                                           "fish-swim": 1.0}),            # one cost
    ({"reacher": 170.0, "walker": 300.0}, {"reacher-easy": 0.2, "walker-walk": 2.0,
                                           "fish-swim": 1.0}),            # slope below 0
    ({"reacher": 300.0, "walker": 10.0}, {"reacher-easy": 1.0, "walker-walk": 1.1,
                                          "fish-swim": 1.0}),             # agent part below 0
    ({"reacher": 300.0, "walker": 170.0}, {"fish-swim": 1.0}),            # no known cost
])
def test_no_prior_without_a_fit_that_makes_sense(known, physics):
    assert plan_lib.prior_sps(known, physics) == {}


def test_the_speed_order():
    measured, prior = {"cartpole": 410.0}, {"cartpole": 250.0, "fish": 190.0, "walker": 1.0}
    assert plan_lib.sps_for("cartpole-swingup", None, measured, prior) == 410.0
    assert plan_lib.sps_for("walker-walk", None, {}, prior) == plan_lib.SPS_BY_DOMAIN["walker"]
    assert plan_lib.sps_for("fish-swim", None, measured, prior) == 190.0
    assert plan_lib.sps_for("hopper-hop", None, measured, prior) == plan_lib.SPS_DEFAULT
    assert plan_lib.sps_for("fish-swim", 99.0, measured, prior) == 99.0


@pytest.mark.parametrize("text", [None, "{", "[]", json.dumps({"schema": "other", "tasks": {}})])
def test_an_absent_or_foreign_physics_file_is_no_physics(tmp_path, text):
    if text is not None:
        (tmp_path / mt19_physics.FILE).write_text(text)
    assert plan_lib.load_physics(tmp_path) == ({}, {})


def test_odd_physics_entries_are_left_out(tmp_path):
    tasks = {"fish-swim": {"ms_per_agent_step": 1.2}, "a-1": {"ms_per_agent_step": -1},
             "a-2": {"ms_per_agent_step": "1"}, "a-3": {"ms_per_agent_step": math.nan},
             "a-4": {"ms_per_agent_step": True}, "a-5": 3.0, "a-6": {}}
    (tmp_path / mt19_physics.FILE).write_text(
        json.dumps({"schema": mt19_physics.SCHEMA, "tasks": tasks}))
    assert plan_lib.load_physics(tmp_path).costs == {"fish-swim": 1.2}
    tasks = {"fish-swim": {"mjx_steps_per_agent_step": 40}, "a-1": {"mjx_steps_per_agent_step":
                                                                     2.5},
             "a-2": {"mjx_steps_per_agent_step": 0}, "a-3": {"mjx_steps_per_agent_step": "8"}}
    (tmp_path / mt19_physics.FILE).write_text(
        json.dumps({"schema": mt19_physics.SCHEMA, "tasks": tasks}))
    assert plan_lib.load_physics(tmp_path).steps == {"fish-swim": 40}


def test_plan_prices_the_domains_not_measured_from_their_physics(tmp_path, capsys):
    costs = {"reacher-easy": 0.17, "walker-walk": 2.7, "cheetah-run": 0.37,
             "fish-swim": 1.18, "acrobot-swingup": 0.03}
    (tmp_path / mt19_physics.FILE).write_text(json.dumps(
        {"schema": mt19_physics.SCHEMA,
         "tasks": {t: {"ms_per_agent_step": v} for t, v in costs.items()}}))
    assert camp.main(["plan", "--home", str(tmp_path), "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    prior = plan_lib.prior_sps(plan_lib.SPS_BY_DOMAIN, costs)
    assert set(prior) == {"fish", "acrobot"}
    assert f"fish {prior['fish']:g} (its physics)" in out
    assert f"acrobot {prior['acrobot']:g} (its physics)" in out
    assert "hopper" not in out.splitlines()[0]              # no cost: the default
    fish = next(r for r in out.splitlines() if r.startswith("fish-swim")).split()
    train_min = float(fish[2] if fish[2] != "->" else fish[4])
    steps = int((fish[1] if fish[2] != "->" else fish[3]).replace(",", ""))
    assert train_min == pytest.approx(steps / prior["fish"] / 60, abs=0.05)


def test_the_probe_records_a_task_and_keeps_the_others(tmp_path, capsys):
    out = tmp_path / "physics.json"
    out.write_text(json.dumps({"schema": mt19_physics.SCHEMA,
                               "tasks": {"fish-swim": {"ms_per_agent_step": 1.0}}}))
    assert mt19_physics.main(["--tasks", "pendulum-swingup", "--steps", "3", "--rounds", "2",
                              "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    e = data["tasks"]["pendulum-swingup"]
    assert e["mjx_steps_per_agent_step"] == 4      # Playground's 2 substeps x action repeat 2
    assert len(e["rounds_ms"]) == 2 and e["ms_per_agent_step"] > 0
    assert e["lanes"] == 2 and e["steps"] == 3 and e["backend"] == "cpu"
    assert data["tasks"]["fish-swim"] == {"ms_per_agent_step": 1.0}
    assert [p.name for p in tmp_path.iterdir()] == ["physics.json"]      # no temporary


@pytest.mark.parametrize("text", ['{"schema": "something/1"}', "[]", "{",
                                  '{"schema": "wmx.mt19_physics/1", "tasks": []}'])
def test_the_probe_refuses_a_foreign_file_and_leaves_it(tmp_path, capsys, monkeypatch, text):
    monkeypatch.setattr(mt19_physics, "measure", lambda *a: pytest.fail("measured"))
    out = tmp_path / "physics.json"
    out.write_text(text)
    assert mt19_physics.main(["--tasks", "pendulum-swingup", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"mt19_physics: error: {out}: ") and "give another --out" in err
    assert len(err.strip().splitlines()) == 1 and out.read_text() == text
    assert [p.name for p in tmp_path.iterdir()] == ["physics.json"]


def test_the_probe_refuses_a_missing_folder_before_measuring(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(mt19_physics, "measure", lambda *a: pytest.fail("measured"))
    assert mt19_physics.main(["--tasks", "pendulum-swingup", "--out",
                              str(tmp_path / "no" / "x.json")]) == 2
    assert "no folder" in capsys.readouterr().err and not (tmp_path / "no").exists()


def test_odd_numbers_in_the_physics_file_give_no_price_and_no_crash(tmp_path, capsys):
    tasks = {"reacher-easy": {"ms_per_agent_step": 0.17, "mjx_steps_per_agent_step": 8},
             "walker-walk": {"ms_per_agent_step": 2.7, "mjx_steps_per_agent_step": 20},
             "cheetah-run": {"ms_per_agent_step": 0.37, "mjx_steps_per_agent_step": 2},
             "hopper-hop": {"ms_per_agent_step": 1e6, "mjx_steps_per_agent_step": 8},
             "fish-swim": {"ms_per_agent_step": 10 ** 400, "mjx_steps_per_agent_step": 10 ** 400}}
    (tmp_path / mt19_physics.FILE).write_text(json.dumps(
        {"schema": mt19_physics.SCHEMA, "tasks": tasks}))
    physics = plan_lib.load_physics(tmp_path)
    assert "fish-swim" not in physics.costs and "fish-swim" not in physics.steps
    assert "hopper" not in plan_lib.model_speeds({}, physics)      # rounds to nothing
    assert camp.main(["plan", "--home", str(tmp_path), "--results", str(tmp_path)]) == 0
    assert "hopper" not in capsys.readouterr().out.splitlines()[0]


def _in_progress(task: str, done: int, total: int, floor: int = 100_000):
    from types import SimpleNamespace
    run = SimpleNamespace(total=total, done=done, path=Path("/h/runs/mt19-tdmpc2-x"))
    return SimpleNamespace(task=task, active=lambda: run, floor=floor)


def _next_args(**measured):
    args = camp.build_parser().parse_args(["next", "--home", "h", "--out", "o",
                                           "--budget-s", "540"])
    args.measured_sps, args.prior_sps = dict(measured), {}
    return args


def _cost(args, env_steps: float, sps: float, elapsed: float = 5.0) -> float:
    import argparse
    resumed = argparse.Namespace(**{**vars(args), "compile_s": args.cached_compile_s})
    return plan_lib.run_cost(env_steps / sps, plan_lib.Clock(elapsed, 0.0), resumed)[0]


def test_a_run_in_progress_that_cannot_finish_is_ended_at_what_fits():
    import _mt19_next as next_lib
    args = _next_args(fish=150.0)
    s = _in_progress("fish-swim", 60_000, 190_000)
    # 130,000 env steps at 150 per s: 866.7 s of training from 5 s into this call: 60 s
    # loading, 430 s training, 45 s reserve, 20 s gap; a call of 40 s start-up, 60, 395,
    # 45, 20; a last one of 40, 60, 41.7 and 30 to finish: 1,286.7 device s
    need = _cost(args, 130_000, 150.0)
    assert need == pytest.approx(1286.7, abs=0.1)
    assert next_lib.finish_check(s, 5.0, need, args) == (None, None)     # it just fits
    assert next_lib.finish_check(s, 5.0, None, args) == (None, None)     # not checked
    # with 20 device minutes left: the largest multiple of 10,000 whose rest fits
    left = 1200.0
    fits = [e for e in range(100_000, 190_000, 10_000) if _cost(args, e - 60_000, 150.0) <= left]
    msg, end = next_lib.finish_check(s, 5.0, left, args)
    assert end == fits[-1] == 180_000 and "\n" not in msg
    assert msg.startswith("fish-swim: its run mt19-tdmpc2-x has 130,000 of 190,000 env steps "
                          "left, about 21.4 device minutes at 150 env steps/s per seed, and "
                          "20.0 are left: ended early at 180,000 env steps")
    # with 8 minutes: 110,000 (60 s loading, 333 s training, 30 s to finish: 423 s)
    assert next_lib.finish_check(s, 5.0, 480.0, args)[1] == 110_000
    # not below the floor: with 5 minutes left 100,000 needs 357 s; said, no end
    msg, end = next_lib.finish_check(s, 5.0, 300.0, args)
    assert end is None and "it will not finish in this session" in msg
    # a regeneration trains its recorded env steps: said, never ended
    msg, end = next_lib.finish_check(s, 5.0, left, args, may_end=False)
    assert end is None and "a regeneration trains its recorded env steps" in msg
    # beyond what it has trained: a run at 175,000 of 190,000 ends no earlier than 180,000
    s = _in_progress("fish-swim", 175_000, 190_000)
    msg, end = next_lib.finish_check(s, 5.0, 60.0, args)
    assert end is None
    assert next_lib.finish_check(_in_progress("fish-swim", 60_000, 190_000), 5.0, left,
                                 _next_args(fish=300.0)) == (None, None)   # faster: fits


def test_end_early_ends_a_real_run_and_refuses_an_end_it_has_passed(tiny_online_run, tmp_path):
    import _mt19_next as next_lib
    from tiny_runs import T, TINY_RC
    from wmx.datasets.store import Store
    from wmx.runs.listing import read_run
    from wmx.train_online import cli as online_cli
    from wmx.train_online import loop as online_loop
    store = Store(tmp_path).ensure_layout()
    run_dir = store.runs_dir / "r"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps(TINY_RC.to_json()))
    online_loop.run(TINY_RC, run_dir, online_cli.make_export(store, TINY_RC, run_dir),
                    progress=False, stop_after_chunks=2)
    with pytest.raises(ValueError, match="but the run has trained 40"):
        next_lib.end_early(run_dir, 2 * T)
    assert "end_env_steps" not in json.loads((run_dir / "config.json").read_text())
    next_lib.end_early(run_dir, 4 * T)
    cfg = json.loads((run_dir / "config.json").read_text())
    assert cfg["end_env_steps"] == 4 * T and read_run(run_dir).total == 4 * T
    from wmx.runs.listing import progress_text
    assert progress_text(read_run(run_dir)) == "40/80 env steps (ends early; --env-steps 120)"
    assert "--end-env-steps 80" in " ".join(next_lib._argv_of_config(cfg))
