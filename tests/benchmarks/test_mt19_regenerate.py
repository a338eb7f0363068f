"""benchmarks/mt19_campaign.py's regeneration at tiny settings (the tiny online run's config on
probe-action, as tests/benchmarks/test_mt19_campaign.py): a recorded source trained again
(``next --regenerate``), in one call or stopped by its budget and resumed, and its bundle
ingested beside the recorded one; the record's ``regenerations`` checked."""
import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _mt19_record as record_lib  # noqa: E402
import mt19_campaign as camp  # noqa: E402
from test_mt19_campaign import TINY  # noqa: E402

TASK = "probe-action"


def _next(tmp: Path, results: Path, home: str, out: str, *flags: str,
          campaign: list[str] = TINY) -> dict:
    """One ``next`` call (exit 0 asserted); its mt19_call.json."""
    assert camp.main(["next", *campaign, "--home", str(tmp / home), "--out", str(tmp / out),
                      "--results", str(results), "--reserve-s", "0", "--min-start-s", "0",
                      *flags]) == 0
    return json.loads((tmp / out / camp.CALL_FILE).read_text())


def _entry(results: Path) -> dict:
    return json.loads((results / record_lib.FILE).read_text())["tasks"][TASK]


@pytest.fixture(scope="module")
def runs(tiny_online_run, tmp_path_factory):
    """The tiny campaign's source run (bundle in out0), recorded in results (ingested into
    the data root first); a regeneration of it stopped by its budget after one chunk (r1)
    and resumed to the end by a call without --regenerate (r2, its bundle); another
    regeneration in one call (r3, its bundle)."""
    tmp = tmp_path_factory.mktemp("mt19-regen")
    results = tmp / "results"
    _next(tmp, tmp / "no-record", "h0", "out0", "--budget-s", "570")
    assert camp.main(["ingest", str(tmp / "out0"), *TINY, "--home", str(tmp / "first"),
                      "--results", str(results)]) == 0
    regen = ("--regenerate", TASK)
    calls = {"r1": _next(tmp, results, "d1", "r1", "--budget-s", "0.001", *regen),
             "r2": _next(tmp, results, "d1", "r2", "--budget-s", "570"),
             "r3": _next(tmp, results, "d2", "r3", "--budget-s", "570", *regen)}
    return tmp, results, calls


def test_reingesting_the_run_a_regeneration_replaced_changes_nothing(runs, tmp_path, capsys):
    """A record naming other sets is replaced by the regeneration; the bundle of the run it
    replaced, ingested again, neither puts it back nor lists it as a regeneration."""
    tmp, results, calls = runs
    other = tmp_path / "other"
    other.mkdir()
    rec = json.loads((results / record_lib.FILE).read_text())
    rec["tasks"][TASK]["episode_sets"][0]["content_hash"] = "0" * 64
    (other / record_lib.FILE).write_text(json.dumps(rec))
    home = ["--home", str(tmp_path / "local"), "--results", str(other)]
    assert camp.main(["ingest", str(tmp / "r2"), *TINY, *home]) == 0
    replaced = _entry(other)
    assert replaced["run"] == f"runs/{calls['r2']['bundles'][0]['run']}"
    assert [ev["replaced"]["run"] for ev in replaced["regenerations"]] == [
        rec["tasks"][TASK]["run"]]
    capsys.readouterr()
    assert camp.main(["ingest", str(tmp / "out0"), *TINY, *home]) == 0
    assert f"{rec['tasks'][TASK]['run']} is already recorded" in capsys.readouterr().out
    assert _entry(other) == replaced


def test_a_damaged_regenerations_list_is_one_line_and_nothing_written(runs, tmp_path, capsys):
    """Events whose ``replaced`` is not what `regenerated` writes, or disagrees with
    ``identical``, are refused by the schema: every command says so in one line naming the
    fix, and ingest writes no record."""
    tmp, results, _ = runs
    good = json.loads((results / record_lib.FILE).read_text())
    old = good["tasks"][TASK]
    replaced = {"run": old["run"], "wmx_commit": old["wmx_commit"], "chip": old["chip"],
                "episode_sets": {"0": "0" * 64, "3": "1" * 64},
                "final_return_mean": old["final_return_mean"]}
    event = {"run": "runs/x", "wmx_commit": "a", "chip": "cpu", "jax": "0", "ingested": "t",
             "identical": False, "final_return_mean": 1.0, "replaced": replaced}
    ok = {**good, "tasks": {TASK: {**old, "regenerations": [event]}}}
    assert record_lib.check(ok) == []
    for damaged in ("x", None, [{**event, "replaced": {}}],
                    [{**event, "replaced": {**replaced, "run": 5}}],
                    [{**event, "replaced": {**replaced, "episode_sets": {"0": 5}}}],
                    [{**event, "identical": True}],
                    [{**event, "replaced": None}]):
        rec = {**good, "tasks": {TASK: {**old, "regenerations": damaged}}}
        assert any("regenerations" in p for p in record_lib.check(rec)), damaged
        bad = tmp_path / "bad"
        shutil.rmtree(bad, ignore_errors=True)
        bad.mkdir()
        (bad / record_lib.FILE).write_text(json.dumps(rec))
        for argv in (["status"], ["plan"], ["ingest", str(tmp / "r3")]):
            assert camp.main([*argv, *TINY, "--home", str(tmp_path / "h"),
                              "--results", str(bad)]) == 2, (damaged, argv)
            err = capsys.readouterr().err.strip()
            assert len(err.splitlines()) == 1 and "regenerations" in err and \
                "restore it from git" in err, err
        assert sorted(p.name for p in bad.iterdir()) == [record_lib.FILE]
        assert json.loads((bad / record_lib.FILE).read_text()) == rec


def test_two_bundles_of_a_task_in_one_ingest_are_both_ingested(runs, tmp_path, capsys):
    """Two device calls' folders each holding probe-action.tar.gz (two regenerations): both
    runs go into the store and under the entry's regenerations, in the order given."""
    tmp, results, calls = runs
    res = tmp_path / "results"
    shutil.copytree(results, res)
    local = tmp_path / "local"
    assert camp.main(["ingest", str(tmp / "r2"), str(tmp / "r3"), *TINY, "--home", str(local),
                      "--results", str(res)]) == 0
    names = [calls[c]["bundles"][0]["run"] for c in ("r2", "r3")]
    e = _entry(res)
    assert [ev["run"] for ev in e["regenerations"]] == [f"runs/{n}" for n in names]
    assert all(ev["identical"] for ev in e["regenerations"])
    assert sorted(p.name for p in (local / "runs").iterdir()) == sorted(names)
    assert record_lib.check(json.loads((res / record_lib.FILE).read_text())) == []


def test_a_regeneration_resumed_without_the_flag_is_still_one(runs):
    """Stopped by its budget after one chunk, the regeneration is resumed by a call without
    --regenerate: both pieces say regenerate, at the recorded env steps, not fitted."""
    tmp, results, calls = runs
    (p1,), (p2,) = calls["r1"]["pieces"], calls["r2"]["pieces"]
    assert (p1["action"], p1["regenerate"], p1["finished"], p1["env_steps_to"]) == \
        ("new", True, False, 20)
    assert (p2["action"], p2["regenerate"], p2["finished"], p2["env_steps_from"],
            p2["env_steps_to"], p2["total_env_steps"], p2["fitted"]) == \
        ("resume", True, True, 20, 120, 120, False)
    assert p1["run"] == p2["run"] == calls["r2"]["bundles"][0]["run"]
    assert calls["r2"]["next"]["what"] == "every task of the campaign is done"


def test_a_run_rounded_up_to_whole_rounds_is_regenerated_with_its_own_flag(runs, tmp_path):
    """A source run of --env-steps 110 trained 120 (whole rounds of 20): the record has
    120 and the command 110. --regenerate, with the recorded run's flags, trains --env-steps
    110 again (stopped and resumed), and ingest finds the same episode sets."""
    tmp, results, _ = runs
    rec = json.loads((results / record_lib.FILE).read_text())
    e = rec["tasks"][TASK]
    e["command"] = e["command"].replace("--env-steps 120", "--env-steps 110")
    assert "--env-steps 110" in e["command"] and e["env_steps"] == 120
    res = tmp_path / "results"
    res.mkdir()
    (res / record_lib.FILE).write_text(json.dumps(rec))
    flags = [("110" if x == "120" else x) for x in TINY]
    regen = ("--regenerate", TASK)
    c1 = _next(tmp_path, res, "d", "o1", "--budget-s", "0.001", *regen, campaign=flags)
    c2 = _next(tmp_path, res, "d", "o2", "--budget-s", "570", *regen, campaign=flags)
    (p1,), (p2,) = c1["pieces"], c2["pieces"]
    assert (p1["action"], p1["total_env_steps"], p2["action"], p2["env_steps_to"],
            p2["finished"]) == ("new", 120, "resume", 120, True)
    cfg = json.loads((tmp_path / "d" / "runs" / p2["run"] / "config.json").read_text())
    assert cfg["env_steps"] == 110
    assert camp.main(["ingest", str(tmp_path / "o2"), *flags, "--home", str(tmp_path / "local"),
                      "--results", str(res)]) == 0
    (ev,) = _entry(res)["regenerations"]
    assert ev["identical"] and ev["run"] == f"runs/{p2['run']}"


@pytest.mark.parametrize("command", ["train_online --agent tdmpc2 --bogus 1",
                                     "train_online --task 'probe-action"])
def test_a_damaged_recorded_command_is_one_line(runs, tmp_path, capsys, command):
    """A recorded command train_online refuses, or that is not shell words: --regenerate
    says so in one line naming the fix, and starts nothing."""
    tmp, results, _ = runs
    rec = json.loads((results / record_lib.FILE).read_text())
    rec["tasks"][TASK]["command"] = command
    (tmp_path / record_lib.FILE).write_text(json.dumps(rec))
    capsys.readouterr()
    assert camp.main(["next", *TINY, "--home", str(tmp_path / "h"), "--out", str(tmp_path / "o"),
                      "--results", str(tmp_path), "--budget-s", "60",
                      "--regenerate", TASK]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "restore mt19_sources.json from git" in err, err
    assert not (tmp_path / "h").exists() and not (tmp_path / "o").exists()


def test_a_source_below_the_campaigns_floor_is_not_regenerated(runs, tmp_path, capsys):
    """Recorded at 120 env steps, under a campaign of a fixed 160 (its floor) the task is
    not done: --regenerate refuses it (next trains it anew) and starts nothing, and a
    regeneration begun under the recorded flags is not resumed as the campaign's run."""
    tmp, results, _ = runs
    flags = [("160" if x == "120" else x) for x in TINY]
    base = ["--home", str(tmp_path / "h"), "--results", str(results), "--reserve-s", "0",
            "--min-start-s", "0"]
    capsys.readouterr()
    assert camp.main(["next", *flags, *base, "--out", str(tmp_path / "o1"), "--budget-s", "570",
                      "--device-left-s", "1", "--regenerate", TASK]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no source of it is recorded at its floor" in err \
        and "160" in err, err
    assert not (tmp_path / "h").exists()
    _next(tmp_path, results, "h", "o2", "--budget-s", "0.001", "--regenerate", TASK)
    capsys.readouterr()
    assert camp.main(["next", *flags, *base, "--out", str(tmp_path / "o3"),
                      "--budget-s", "570"]) == 2
    err = capsys.readouterr().err
    assert "other settings (" in err and "env_steps" in err
